"""Orphans, made the real way (force delete): flagged, costed, reclaimed only when safe."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.models import Location
from cloud.whitesky import whitesky_client
from clusters.models import Machine
from clusters.releases import SweepResult
from clusters.services import machine_force_delete
from gpus.models import GpuProfile, VgpuReservation
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import auto_release_set, orphan_made, sweep

State = VgpuReservation.State


def test_force_deleted_machine_leaves_an_orphan_whose_cost_grows_with_time(plane: Plane) -> None:
    row = orphan_made(plane)

    assert row.orphaned_since is not None
    assert (row.owner_cluster, row.owner_machine, row.machine_id) == ("demo", "a100-0", None)
    assert row.location.vgu_price == Decimal("300.0")
    hour = row.accrued_cost(now=row.orphaned_since + timedelta(hours=1))
    month = row.accrued_cost(now=row.orphaned_since + timedelta(hours=730))
    assert Decimal(0) < hour < month
    assert month == Decimal("300.00")  # a month of one vGPU at the location's price


def test_orphan_is_never_released_when_the_account_does_not_allow_it(plane: Plane) -> None:
    auto_release_set(plane.account, on=False, confirmations=1)
    orphan_made(plane)
    plane.observe()

    assert sweep(plane) == SweepResult()
    assert [v["vgpu_name"] for v in plane.sim_vgpus()] == ["capvco-demo-a100-0-gpu-0"]
    assert not AuditEvent.objects.filter(action="vgpu.release").exists()


def test_orphan_is_released_after_enough_complete_observations_with_its_vm(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, on=True, confirmations=2, grace_seconds=0)
    row = orphan_made(plane)  # first complete observation
    assert row.orphan_confirmations == 1
    assert [vm["name"] for vm in plane.sim_vms()] == ["capvco-demo-a100-0"]

    assert sweep(plane) == SweepResult()
    assert len(plane.sim_vgpus()) == 1

    plane.observe()  # second complete observation
    assert sweep(plane) == SweepResult(
        released=["capvco-demo-a100-0-gpu-0"], removed=["capvco-demo-a100-0"]
    )

    assert plane.sim_vgpus() == []
    assert plane.sim_vms() == []  # the machine's VM was ours and had no machine
    assert plane.unassigned_billed() == {}
    event = AuditEvent.objects.get(action="vgpu.release")
    assert event.actor_name == "orphan-sweep"
    assert event.actor is None
    assert "orphaned since" in event.reason
    assert AuditEvent.objects.filter(action="vm.delete", actor_name="orphan-sweep").exists()
    plane.observe()
    assert VgpuReservation.objects.get(pk=row.pk).state == State.RELEASED


def test_partial_listing_changes_no_orphan_flag(plane: Plane) -> None:
    row = orphan_made(plane)
    before = (row.orphaned_since, row.orphan_confirmations)
    assert before[1] == 1

    plane.sim.fault(operation="listCustomerVGPUS", status=400)
    plane.observe()

    row.refresh_from_db()
    assert (row.orphaned_since, row.orphan_confirmations) == before
    assert not Location.objects.get(name=NL).observation_complete


def test_partial_listing_flags_no_new_orphan(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    machine_force_delete(
        machine=Machine.objects.get(), actor=SystemActor.RECONCILER, reason="stuck"
    )
    plane.sim.fault(operation="listCustomerVGPUS", status=400)
    plane.observe()

    row = VgpuReservation.objects.get(name="capvco-demo-a100-0-gpu-0")
    assert (row.orphaned_since, row.orphan_confirmations) == (None, 0)
    assert not Location.objects.get(name=NL).observation_complete


def test_sweep_refuses_from_partial_listing_even_when_the_orphan_is_due(plane: Plane) -> None:
    auto_release_set(plane.account, on=True, confirmations=1, grace_seconds=0)
    orphan_made(plane)  # due now: one confirmation is enough

    plane.sim.fault(operation="listCustomerVGPUS", status=400)
    plane.observe()

    assert sweep(plane) == SweepResult()
    plane.sim.clear_faults()
    assert [v["vgpu_name"] for v in plane.sim_vgpus()] == ["capvco-demo-a100-0-gpu-0"]
    assert len(plane.sim_vms()) == 1
    assert not AuditEvent.objects.filter(action__in=["vgpu.release", "vm.delete"]).exists()


def test_reservation_not_named_by_us_is_flagged_but_never_auto_released(plane: Plane) -> None:
    auto_release_set(plane.account, on=True, confirmations=1, grace_seconds=0)
    plane.observe()
    card = GpuProfile.objects.filter(location__name=NL, available_instances__gt=0).first()
    assert card is not None
    with whitesky_client(plane.account) as client:
        client.reserve_vgpu(location=NL, gpu_id=card.profile_id, name="someone-elses")
    plane.observe()
    plane.observe()

    row = VgpuReservation.objects.get(name="someone-elses")
    assert row.orphaned_since is not None
    assert (row.owner_cluster, row.owner_machine) == ("", "")
    assert sweep(plane) == SweepResult()
    assert [v["vgpu_name"] for v in plane.sim_vgpus(prefix="someone-")] == ["someone-elses"]
    assert VgpuReservation.objects.get(pk=row.pk).state == State.RESERVED
