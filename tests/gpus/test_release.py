"""Releasing reservations: a person's request survives a lost task, a release whose outcome
was lost is finished by the next passes, a machine's GPU is refused up front (saying what to
do instead), and of two releases of one row only one acts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.models import Account
from cloud.whitesky import whitesky_client
from clusters.models import Machine
from clusters.releases import SweepResult, reservation_release_request
from clusters.tasks import orphan_sweep_all
from gpus.models import GpuProfile, ListedVgpu, VgpuReservation
from gpus.services import ReleaseRefused, reservation_release
from tests.factories import MembershipFactory
from tests.gpus.conftest import BE, NL, Plane
from tests.gpus.support import auto_release_set, orphan_made, sweep

State = VgpuReservation.State


@pytest.fixture
def person(plane: Plane) -> User:
    """An operator of the account: may release its reservations."""
    membership = MembershipFactory(user__username="ops", account=plane.account, role="operator")
    return membership.user  # type: ignore[no-any-return]


@pytest.fixture
def api_user(person: User) -> User:
    """`api` calls as the operator."""
    return person


def release_post(api: APIClient, row: VgpuReservation, reason: str = "not needed") -> Any:
    return api.post(f"/api/v1/reservations/{row.pk}/release/", {"reason": reason}, format="json")


def unassigned_made(plane: Plane, name: str = "capvco-gone-x-0-gpu-0") -> VgpuReservation:
    """A reservation attached to nothing, with our prefix and no cluster: observed."""
    plane.observe()
    card = GpuProfile.objects.filter(location__name=NL, available_instances__gt=0).first()
    assert card is not None
    with whitesky_client(plane.account) as client:
        client.reserve_vgpu(location=NL, gpu_id=card.profile_id, name=name)
    plane.observe()
    return VgpuReservation.objects.get(name=name)


def deletes_sent(plane: Plane) -> int:
    return sum(1 for c in plane.sim.calls()["calls"] if c["operation"] == "deleteVGPU")


# --- D: a machine's GPU is refused up front; orphans and unassigned go in one step ---------


def test_api_refuses_to_release_a_machines_gpu_with_409_naming_machine_and_what_to_do(
    plane: Plane, api: APIClient, run_tasks: Any
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "t4", location=BE, gpu_type="NVIDIA T4", gpu_count=1)
    plane.converge(cluster)
    row = VgpuReservation.objects.get()
    vm_id = Machine.objects.get().vm_id

    with run_tasks():
        response = release_post(api, row)

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"capvco-demo-t4-0-gpu-0 is attached to machine demo/t4-0 (VM {vm_id}): "
        "scale pool t4 down or delete the machine",
        "code": "release_refused",
    }
    row.refresh_from_db()
    assert (row.state, row.release_requested_at) == (State.ATTACHED, None)
    assert deletes_sent(plane) == 0
    assert [vm["status"] for vm in plane.sim_vms()] == ["RUNNING"]
    assert len(plane.sim_vgpus()) == 1


def test_orphan_on_a_vm_no_machine_owns_is_released_in_one_step_with_its_vm(
    plane: Plane, api: APIClient, person: User, run_tasks: Any
) -> None:
    auto_release_set(plane.account, on=False)
    row = orphan_made(plane)  # attached to the force-deleted machine's running VM

    with run_tasks():
        response = release_post(api, row, "machine was force-deleted")

    assert response.status_code == 202
    assert response.json()["release_requested_by"] == "ops"
    assert plane.sim_vms() == [] and plane.sim_vgpus() == []
    assert plane.unassigned_billed() == {}
    vm_delete, release = AuditEvent.objects.filter(
        action__in=["vm.delete", "vgpu.release"]
    ).order_by("pk")
    assert (vm_delete.action, vm_delete.actor) == ("vm.delete", person)
    assert (release.action, release.actor, release.reason) == (
        "vgpu.release",
        person,
        "machine was force-deleted",
    )


def test_unassigned_reservation_is_released_in_one_step(
    plane: Plane, api: APIClient, run_tasks: Any
) -> None:
    row = unassigned_made(plane)

    with run_tasks():
        assert release_post(api, row).status_code == 202

    assert plane.sim_vgpus() == []
    plane.observe()
    assert VgpuReservation.objects.get(pk=row.pk).state == State.RELEASED


def test_second_request_while_one_is_pending_is_refused(plane: Plane, api: APIClient) -> None:
    row = unassigned_made(plane)

    first, second = release_post(api, row), release_post(api, row)

    assert first.status_code == 202
    assert second.status_code == 409
    assert "asked for its release already" in second.json()["detail"]
    assert AuditEvent.objects.filter(action="vgpu.release_requested").count() == 1


def test_of_two_concurrent_releases_of_one_row_only_the_one_that_claims_it_acts(
    plane: Plane,
) -> None:
    row = unassigned_made(plane)
    mine, theirs = (VgpuReservation.objects.get(pk=row.pk) for _ in range(2))

    with whitesky_client(plane.account) as client:
        assert reservation_release(
            client=client, reservation=mine, actor=SystemActor.RECONCILER, reason="r"
        )
        # `theirs` was read before the claim: it is stale, and its claim fails.
        assert not reservation_release(
            client=client, reservation=theirs, actor=SystemActor.ORPHAN_SWEEP, reason="r"
        )

    assert deletes_sent(plane) == 1
    assert list(AuditEvent.objects.values_list("action", "actor_name")) == [
        ("vgpu.release", "reconciler")
    ]


def test_refusal_by_whitesky_puts_the_row_back_and_records_why(
    plane: Plane, api: APIClient, run_tasks: Any
) -> None:
    row = unassigned_made(plane)
    plane.sim.fault(operation="deleteVGPU", status=400)

    with run_tasks():
        assert release_post(api, row).status_code == 202

    row.refresh_from_db()
    assert row.state == State.RESERVED
    assert "HTTP 400" in row.release_error
    refusal = AuditEvent.objects.get(action="vgpu.release_refused")
    assert refusal.actor_name == "ops"
    # The request was carried out (refused): the sweep does not repeat it every pass.
    plane.sim.clear_faults()
    assert sweep(plane).released == []
    assert len(plane.sim_vgpus()) == 1


def test_revert_after_a_refusal_leaves_a_row_another_worker_claimed_meanwhile(
    plane: Plane,
) -> None:
    row = unassigned_made(plane)
    theirs = timezone.now() + timedelta(seconds=5)

    def another_claim_then_refusal() -> None:
        VgpuReservation.objects.filter(pk=row.pk).update(release_attempted_at=theirs)
        raise ReleaseRefused("refused for this test")

    with whitesky_client(plane.account) as client, pytest.raises(ReleaseRefused):
        reservation_release(
            client=client,
            reservation=row,
            actor=SystemActor.RECONCILER,
            reason="r",
            prepare=another_claim_then_refusal,
        )

    row.refresh_from_db()
    assert (row.state, row.release_attempted_at, row.release_error) == (
        State.RELEASING,
        theirs,
        "",
    )
    assert deletes_sent(plane) == 0


# --- C: a person's request does not depend on one Celery message --------------------------


def test_recorded_request_whose_task_never_ran_is_carried_out_by_the_beats_sweep(
    plane: Plane, api: APIClient, person: User, run_tasks: Any
) -> None:
    auto_release_set(plane.account, on=False)  # not an automatic release: the person's
    row = unassigned_made(plane)

    response = release_post(api, row, "left over")  # its task is never sent (no commit)

    assert response.status_code == 202
    row.refresh_from_db()
    assert (row.release_requested_by, row.release_reason) == (person, "left over")
    assert row.release_requested_at is not None
    assert len(plane.sim_vgpus()) == 1

    with run_tasks():
        orphan_sweep_all()  # what beat sends every minute

    assert plane.sim_vgpus() == []
    event = AuditEvent.objects.get(action="vgpu.release")
    assert (event.actor, event.reason) == (person, "left over")


def test_release_whose_worker_died_after_claiming_is_sent_again_by_the_next_sweep(
    plane: Plane, person: User
) -> None:
    auto_release_set(plane.account, on=False)
    row = unassigned_made(plane)
    reservation_release_request(reservation=row, actor=person, reason="left over")
    # A worker claims the row, then dies before its call: its release lock goes with it.
    VgpuReservation.objects.filter(pk=row.pk).update(
        state=State.RELEASING, release_attempted_at=timezone.now()
    )

    assert sweep(plane).released == [row.name]

    assert plane.sim_vgpus() == []
    event = AuditEvent.objects.get(action="vgpu.release")
    assert (event.actor, event.reason) == (person, "left over")


# --- B: a release whose outcome was lost is finished by the next passes -------------------


def test_release_that_did_not_happen_and_lost_its_outcome_is_sent_again_and_confirmed(
    plane: Plane, api: APIClient, run_tasks: Any
) -> None:
    row = unassigned_made(plane)
    # Every attempt fails with 503: the client gives up, and cannot tell what happened.
    plane.sim.fault(operation="deleteVGPU", status=503, retry_after=0, times=4)

    with run_tasks():
        assert release_post(api, row).status_code == 202

    row.refresh_from_db()
    assert row.state == State.RELEASING
    plane.observe()  # still listed: still releasing, still billed
    assert VgpuReservation.objects.get(pk=row.pk).state == State.RELEASING
    assert len(plane.sim_vgpus()) == 1

    assert sweep(plane).released == [row.name]
    plane.observe()

    assert VgpuReservation.objects.get(pk=row.pk).state == State.RELEASED
    assert plane.sim_vgpus() == []
    assert plane.unassigned_billed() == {}
    actors = AuditEvent.objects.filter(action="vgpu.release").values_list("actor_name", flat=True)
    assert list(actors) == ["ops", "ops"]  # sent again as the person who asked


def test_release_done_whose_answer_was_lost_is_confirmed_by_the_next_complete_listing(
    plane: Plane, api: APIClient, run_tasks: Any
) -> None:
    row = unassigned_made(plane)
    # The release happens and its answer is dropped; the client's repeats then meet 503s.
    plane.sim.fault(operation="deleteVGPU", lost_response="drop", times=1)
    plane.sim.fault(operation="deleteVGPU", status=503, retry_after=0, skip=1, times=3)

    with run_tasks():
        assert release_post(api, row).status_code == 202

    assert VgpuReservation.objects.get(pk=row.pk).state == State.RELEASING
    assert plane.sim_vgpus() == []
    plane.observe()

    assert VgpuReservation.objects.get(pk=row.pk).state == State.RELEASED
    assert sweep(plane).released == []  # nothing left to send


def test_release_stuck_releasing_under_an_old_version_is_sent_again(plane: Plane) -> None:
    # A row left `releasing` without an attempt time (before it was recorded).
    row = unassigned_made(plane)
    VgpuReservation.objects.filter(pk=row.pk).update(state=State.RELEASING)

    assert sweep(plane).released == [row.name]

    assert plane.sim_vgpus() == []
    event = AuditEvent.objects.get(action="vgpu.release")
    assert event.actor_name == "orphan-sweep"
    assert event.reason == "sent again: the release was never confirmed"


def test_reconciler_may_send_again_a_release_it_left_releasing(plane: Plane) -> None:
    row = unassigned_made(plane)
    VgpuReservation.objects.filter(pk=row.pk).update(state=State.RELEASING)
    row.refresh_from_db()

    with whitesky_client(plane.account) as client:
        assert reservation_release(
            client=client, reservation=row, actor=SystemActor.RECONCILER, reason="r"
        )

    assert plane.sim_vgpus() == []


# --- E: orphans provably ours are reclaimed without a person, by default -----------------


def test_auto_release_is_on_by_default_and_waits_for_grace_and_confirmations(
    plane: Plane,
) -> None:
    account = Account.objects.get(pk=plane.account.pk)
    assert (account.orphan_auto_release, account.orphan_confirmations) == (True, 3)
    assert account.orphan_grace_period == timedelta(hours=1)
    orphan_made(plane)
    plane.observe()
    plane.observe()  # three complete listings
    soon, later = timezone.now() + timedelta(minutes=59), timezone.now() + timedelta(hours=1)

    assert sweep(plane, now=soon).released == []
    result = sweep(plane, now=later)

    assert result.removed == ["capvco-demo-a100-0"]
    assert result.released == ["capvco-demo-a100-0-gpu-0"]
    assert plane.sim_vgpus() == [] and plane.sim_vms() == []


def test_orphan_named_for_another_accounts_cluster_is_never_released_automatically(
    plane: Plane,
) -> None:
    """Another account of ours that names the same whitesky customer (its API host and
    customer id, in any case) sees the same vGPUs: one named for its cluster is its own."""
    auto_release_set(plane.account, confirmations=1)
    other = Account.objects.create(
        name="other", api_url=plane.account.api_url, iam_url=plane.account.iam_url,
        customer_id=plane.account.customer_id.upper(), credential="x",
    )  # fmt: skip
    other.clusters.create(name="blue")
    row = unassigned_made(plane, "capvco-blue-a-0-gpu-0")
    plane.observe()

    assert row.orphaned_since is not None
    assert sweep(plane).released == []
    assert len(plane.sim_vgpus()) == 1


def test_a_cluster_of_another_whitesky_customer_decides_nothing_about_our_orphans(
    plane: Plane,
) -> None:
    """Cluster names are unique per whitesky customer only: another customer may have a
    cluster `blue` too, and its vGPUs are never in our listings. Ours named for `blue`
    (no cluster of this customer carries it) is an orphan like any other."""
    auto_release_set(plane.account, confirmations=1)
    other = Account.objects.create(
        name="other", api_url=plane.account.api_url, iam_url=plane.account.iam_url,
        customer_id="another-customer", credential="x",
    )  # fmt: skip
    other.clusters.create(name="blue")
    row = unassigned_made(plane, "capvco-blue-a-0-gpu-0")
    plane.observe()

    assert row.orphaned_since is not None
    assert sweep(plane).released == ["capvco-blue-a-0-gpu-0"]
    assert plane.sim_vgpus() == []


def test_automatic_release_refused_by_whitesky_is_tried_again_once_per_grace_period(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, confirmations=1, grace_seconds=3600)
    row = unassigned_made(plane)
    ListedVgpu.objects.filter(location=row.location, vgpu_id=row.vgpu_id).update(
        orphaned_since=timezone.now() - timedelta(hours=2)
    )
    plane.sim.fault(operation="deleteVGPU", status=400)

    first = sweep(plane)
    again = sweep(plane)
    an_hour_later = sweep(plane, now=timezone.now() + timedelta(hours=1, seconds=1))

    assert first.released == [] and "HTTP 400" in first.errors[0]
    assert again == SweepResult()  # not claimed, called and audited every pass
    assert an_hour_later.released == [] and "HTTP 400" in an_hour_later.errors[0]
    assert deletes_sent(plane) == 2
    assert AuditEvent.objects.filter(action="vgpu.release_refused").count() == 2


def test_admin_release_records_the_request_and_sends_it_to_a_worker(
    plane: Plane, admin_client: Client, admin_user: Any
) -> None:
    row = unassigned_made(plane)

    response = admin_client.post(
        "/admin/gpus/vgpureservation/",
        {"action": "release_selected", "_selected_action": [row.pk], "confirm": "yes",
         "reason": "left over"},
    )  # fmt: skip

    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.release_requested_by, row.release_reason) == (admin_user, "left over")
    assert len(plane.sim_vgpus()) == 1  # no task ran in this test: the sweep will do it
    assert sweep(plane).released == [row.name]
    assert plane.sim_vgpus() == []
