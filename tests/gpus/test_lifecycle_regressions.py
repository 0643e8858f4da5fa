"""Findings of the GPU lifecycle, each reproduced against the simulator over real HTTP:
a fresh VM destroyed as vanished, a force delete that broke its replacement, a bad site
that stopped a whole location, a lost create or reserve sent twice, a driver version
ignored, timestamps that never moved."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.models import Location
from cloud.whitesky import whitesky_client
from clusters import observe
from clusters.models import ClusterSite, Machine, MachinePool
from clusters.observe import vgpu_listing_apply
from clusters.orphans import VmOwners
from clusters.reconcile import machine_create
from clusters.services import machine_force_delete
from gpus.models import VgpuReservation
from gpus.selectors import orphans_list
from gpus.services import release_lock
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import auto_release_set, orphan_made, sweep

RState = VgpuReservation.State


def vm_names(plane: Plane) -> list[str]:
    return sorted(vm["name"] for vm in plane.sim_vms())


# --- 1. "vanished" only from a listing begun after the VM was made ---------------------


def test_a_vm_made_after_the_last_listing_began_is_not_taken_for_vanished(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
    plane.observe()
    # Both VMs are made after that observation's listings began; the passes below run on
    # that older picture, which does not show them.
    for _ in range(3):
        plane.reconcile(cluster)
    machines = {m.name: m.vm_id for m in Machine.objects.all()}

    assert set(Machine.objects.values_list("phase", flat=True)) == {Machine.Phase.RUNNING}
    assert not AuditEvent.objects.filter(action="machine.recreate").exists()
    plane.observe()  # a listing begun after they were made shows them
    plane.reconcile(cluster)
    assert {m.name: m.vm_id for m in Machine.objects.all()} == machines
    assert not AuditEvent.objects.filter(action="machine.recreate").exists()
    assert vm_names(plane) == ["capvco-demo-a100-0", "capvco-demo-a100-1"]


def test_a_vm_deleted_outside_is_replaced_once_a_later_listing_lacks_it(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    machine = Machine.objects.get()
    old_vm = machine.vm_id
    with whitesky_client(plane.account) as client:
        client.stop_vm(cloudspace_id="cs-demo-nl", vm_id=old_vm)
        client.delete_vm(
            cloudspace_id="cs-demo-nl", vm_id=old_vm, permanently=True, detach_gpu=True
        )

    plane.converge(cluster)

    machine.refresh_from_db()
    assert machine.phase == Machine.Phase.RUNNING and machine.vm_id not in (None, old_vm)
    assert AuditEvent.objects.filter(action="machine.recreate").count() == 1
    [vgpu] = plane.sim_vgpus()
    assert vgpu["vm_id"] == machine.vm_id  # the same reservation, on the new VM


def test_a_listing_begun_before_an_attach_does_not_undo_it_in_the_mirror(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    location = Location.objects.get(name=NL)
    began = timezone.now()
    with whitesky_client(plane.account) as client:
        before_attach = client.list_vgpus(location=NL)  # begun before the reserve
    plane.reconcile(cluster)
    row = VgpuReservation.objects.get()
    assert row.state == RState.ATTACHED

    vgpu_listing_apply(location=location, listing=before_attach, listed_at=began)

    row.refresh_from_db()
    assert (row.state, row.vm_id) == (RState.ATTACHED, Machine.objects.get().vm_id)


# --- 2. a force-deleted machine's leftovers are orphans; its replacement is new ----------


def test_force_delete_leaves_orphans_and_the_replacement_is_a_new_machine(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "t4", location="be-mac-dc01-001", gpu_type="NVIDIA T4", gpu_count=1)
    plane.converge(cluster)
    old = Machine.objects.get()
    machine_force_delete(machine=old, actor=SystemActor.RECONCILER, reason="stuck")

    plane.converge(cluster)

    new = Machine.objects.get()
    assert new.name == "t4-1" and new.phase == Machine.Phase.RUNNING, new.failure_message
    assert new.vm_id != old.vm_id
    leftover = VgpuReservation.objects.get(name="capvco-demo-t4-0-gpu-0")
    assert leftover.machine_id is None and leftover.orphaned_since is not None
    assert list(orphans_list()) == [leftover]
    assert VgpuReservation.objects.get(name="capvco-demo-t4-1-gpu-0").machine_id == new.pk


def test_a_pool_made_again_never_reuses_an_index_whose_names_are_still_listed(
    plane: Plane,
) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    machine_force_delete(
        machine=Machine.objects.get(), actor=SystemActor.RECONCILER, reason="stuck"
    )
    plane.observe()
    # As a pool deleted and made again under the same name would be.
    MachinePool.objects.filter(pk=pool.pk).update(next_index=0, replicas=1)

    plane.converge(cluster)

    assert Machine.objects.get().name == "a100-1"


# --- 6. one bad site flags itself, not its location --------------------------------------


def test_a_site_whose_cloudspace_does_not_exist_does_not_stop_its_location(plane: Plane) -> None:
    broken = plane.cluster("broken", sites=())
    ClusterSite.objects.create(
        cluster=broken, location=plane.location(NL), cloudspace_id="cs-gone", image_id=11
    )
    good = plane.cluster("good", sites=(NL,))
    plane.pool(good, "a100", gpu_type="NVIDIA A100", gpu_count=1)

    plane.converge(good)

    assert Machine.objects.get(pool__cluster=good).phase == Machine.Phase.RUNNING
    assert Location.objects.get(name=NL).observation_complete
    assert "cs-gone" in broken.sites.get().observation_error
    assert good.sites.get().observation_error == ""


# --- 11. a create or reserve in flight is never sent twice -------------------------------


def test_a_create_that_may_still_land_is_not_sent_again(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "cpu")
    plane.converge(cluster, passes=1)
    machine = Machine.objects.get()
    # As a worker killed after sending the create leaves it: no VM id recorded, and the
    # create may still land (here: it never will, but nobody can know before the deadline).
    with whitesky_client(plane.account) as client:
        client.stop_vm(cloudspace_id="cs-demo-nl", vm_id=machine.vm_id)
        client.delete_vm(cloudspace_id="cs-demo-nl", vm_id=machine.vm_id, permanently=True)
    deadline = timezone.now() + timedelta(minutes=5)
    Machine.objects.filter(pk=machine.pk).update(
        vm_id=None, phase=Machine.Phase.CREATING, vm_create_deadline=deadline
    )
    plane.sim.clear_calls()

    result = plane.reconcile(cluster)

    assert "may still land" in result.errors[0]
    assert plane.sim.calls()["writes"] == 0 and vm_names(plane) == []
    # Once the deadline has passed, a listing without it says it never happened.
    Machine.objects.filter(pk=machine.pk).update(vm_create_deadline=timezone.now())
    plane.converge(cluster)
    assert vm_names(plane) == ["capvco-demo-cpu-0"]
    assert Machine.objects.get().phase == Machine.Phase.RUNNING


def test_a_create_whose_answer_was_lost_is_adopted_not_repeated(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    plane.sim.fault(operation="createVirtualMachine", lost_response="drop", times=1)

    plane.converge(cluster)

    assert vm_names(plane) == ["capvco-demo-a100-0"]
    assert Machine.objects.get().phase == Machine.Phase.RUNNING


def test_a_reserve_in_flight_is_waited_for_and_never_made_twice(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    plane.sim.fault(operation="reserveAndAttachVGPUToVM", lost_response="drop", times=1)
    plane.reconcile(cluster)
    pending = VgpuReservation.objects.get()
    assert (pending.vgpu_id, pending.reserve_deadline is not None) == (None, True)
    # The listing used to resolve it began before the reserve landed (as when a worker
    # dies mid-call and the task is redelivered at once): pretend it is not there yet.
    plane.sim.fault(operation="listCustomerVGPUS", status=503, times=2, retry_after=0)

    plane.converge(cluster)

    [vgpu] = plane.sim_vgpus()
    assert vgpu["vgpu_name"] == "capvco-demo-a100-0-gpu-0" and vgpu["gpu_id"]
    assert VgpuReservation.objects.exclude(state=RState.RELEASED).count() == 1
    assert Machine.objects.get().phase == Machine.Phase.RUNNING


def test_a_reserve_that_never_happened_is_made_on_a_real_card_after_its_deadline(
    plane: Plane,
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    machine = Machine.objects.get()
    # A reserve recorded but never sent (the worker died first); its deadline has passed.
    row = VgpuReservation.objects.get()
    with whitesky_client(plane.account) as client:
        client.stop_vm(cloudspace_id="cs-demo-nl", vm_id=machine.vm_id)
        client.release_vgpu(location=NL, vgpu_id=row.vgpu_id)
    VgpuReservation.objects.filter(pk=row.pk).update(
        vgpu_id=None, state=RState.RESERVING, reserve_deadline=timezone.now(), vm_id=None
    )
    Machine.objects.filter(pk=machine.pk).update(phase=Machine.Phase.ATTACHING)

    plane.converge(cluster)

    [vgpu] = plane.sim_vgpus()
    assert vgpu["gpu_id"] and vgpu["vm_id"] == machine.vm_id
    assert Machine.objects.get().phase == Machine.Phase.RUNNING


# --- 8. the driver version reaches the VM ------------------------------------------------


def test_the_pool_driver_version_is_in_the_vms_user_data_and_on_the_machine(
    plane: Plane,
) -> None:
    cluster = plane.cluster()
    plane.pool(
        cluster,
        "a100",
        gpu_type="NVIDIA A100",
        gpu_count=1,
        gpu_driver_version="550.90.07",
        user_data="#!/bin/sh\necho hello\n",
    )
    plane.converge(cluster)

    machine = Machine.objects.get()
    [vm] = plane.sim_vms()
    assert machine.gpu_driver_version == "550.90.07"
    assert 'content: "550.90.07\\n"' in vm["user_data"]
    assert "echo hello" in vm["user_data"]  # the pool's own part is kept


@pytest.mark.parametrize("version", ["latest", "550;rm -rf /", "5.5.5.5.5"])
def test_a_driver_version_that_is_not_one_is_refused(
    plane: Plane, admin_user: object, version: str
) -> None:
    cluster = plane.cluster()
    api = APIClient()
    api.force_authenticate(admin_user)
    body = {
        "cluster": cluster.pk,
        "site": cluster.sites.get(location__name=NL).pk,
        "name": "a100",
        "gpu": {"type": "NVIDIA A100", "count": 1, "driverVersion": version},
    }
    response = api.post("/api/v1/pools/", body, format="json")
    assert response.status_code == 400
    assert "driverVersion" in response.json()["fields"]["gpu"]


# --- 10. timestamps that move --------------------------------------------------------------


def test_timestamps_say_when_things_changed_and_were_last_wholly_seen(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "cpu")
    plane.observe()
    location = Location.objects.get(name=NL)
    first = location.last_complete_observation_at
    assert first is not None

    plane.converge(cluster)
    machine = Machine.objects.get()
    assert machine.updated_at > machine.created_at  # phases moved it

    plane.sim.fault(operation="listCustomerVGPUS", status=400, times=1)
    plane.observe()
    location.refresh_from_db()
    assert not location.observation_complete
    assert location.last_complete_observation_at is not None
    assert location.last_complete_observation_at > first  # converge observed meanwhile
    partial_at = location.observation_started_at
    assert partial_at is not None and partial_at > location.last_complete_observation_at


def test_a_pending_reserve_of_a_machine_deleted_with_force_is_settled_by_the_listing(
    plane: Plane,
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    # The reserve's answer is lost and the call never landed (5xx before acting); then
    # the machine is deleted with force, so no reconcile resolves the row any more.
    plane.sim.fault(operation="reserveAndAttachVGPUToVM", status=500, times=1)
    plane.reconcile(cluster)
    pending = VgpuReservation.objects.get()
    assert pending.vgpu_id is None
    machine_force_delete(
        machine=Machine.objects.get(), actor=SystemActor.RECONCILER, reason="stuck"
    )
    pool = cluster.pools.get()
    pool.replicas = 0
    pool.save()

    plane.observe()  # begun before the deadline: nothing decided
    assert VgpuReservation.objects.filter(pk=pending.pk).exists()
    VgpuReservation.objects.filter(pk=pending.pk).update(reserve_deadline=timezone.now())
    plane.observe()  # a whole listing begun after it, without the name: it never happened

    assert not VgpuReservation.objects.filter(pk=pending.pk).exists()
    assert plane.sim_vgpus() == []


# --- 12. found by the seeded fault run (tests/chaos.py) ----------------------------------


@contextmanager
def release_in_flight_elsewhere(row: VgpuReservation) -> Iterator[None]:
    """Another worker (its own database session) in the middle of releasing `row`."""
    holding, done = threading.Event(), threading.Event()

    def worker() -> None:
        try:
            with release_lock(row) as taken:
                assert taken
                holding.set()
                done.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert holding.wait(timeout=10)
        yield
    finally:
        done.set()
        thread.join()


def claimed_then_died(row: VgpuReservation) -> None:
    """What a worker killed between its claim and its call leaves: `releasing`, just now."""
    VgpuReservation.objects.filter(pk=row.pk).update(
        state=RState.RELEASING, release_attempted_at=timezone.now()
    )


def test_an_orphan_release_whose_worker_died_after_its_claim_is_sent_again_at_once(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, confirmations=1)
    row = orphan_made(plane)
    claimed_then_died(row)

    result = sweep(plane)

    assert result.released == [row.name], result.errors
    assert plane.sim_vgpus(row.name) == []
    assert plane.unassigned_billed() == {}


def test_a_release_in_flight_in_another_worker_is_not_sent_twice(
    plane: Plane, require_postgres: None
) -> None:
    auto_release_set(plane.account, confirmations=1)
    row = orphan_made(plane)
    claimed_then_died(row)
    plane.sim.clear_calls()

    with release_in_flight_elsewhere(row):
        assert sweep(plane).released == []
        calls = plane.sim.calls()["calls"]
        assert [c for c in calls if c["operation"] == "deleteVGPU"] == []
    assert sweep(plane).released == [row.name]  # that attempt ended unconfirmed: again


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "gpus", [{}, {"gpu_type": "NVIDIA A100", "gpu_count": 1}], ids=["cpu", "gpu"]
)
def test_a_machine_force_deleted_while_its_vm_is_made_ends_the_step_and_the_vm_is_swept(
    plane: Plane, require_postgres: None, gpus: dict[str, Any]
) -> None:
    auto_release_set(plane.account, confirmations=1)
    cluster = plane.cluster()
    plane.pool(cluster, "pool", **gpus)
    plane.observe()
    plane.sim.fault(operation="createVirtualMachine", latency_ms=1500, times=1)

    def force_delete_once_the_create_is_sent() -> None:
        try:
            for _ in range(100):
                machine = Machine.objects.filter(vm_create_deadline__isnull=False).first()
                if machine is not None:
                    machine_force_delete(
                        machine=machine, actor=SystemActor.RECONCILER, reason="stuck"
                    )
                    return
                time.sleep(0.05)
        finally:
            connection.close()

    person = threading.Thread(target=force_delete_once_the_create_is_sent)
    person.start()
    result = plane.reconcile(cluster)  # the VM lands after its machine was deleted
    person.join()

    assert not Machine.objects.filter(name="pool-0").exists()
    assert any("deleted meanwhile" in error for error in result.errors), result.errors
    assert plane.sim_vgpus() == []  # nothing reserved for a machine that is gone
    plane.observe()
    sweep(plane)
    assert plane.sim_vms() == []  # the VM it left is an orphan, and swept


def test_a_pool_edit_saved_while_a_machine_was_made_does_not_wind_its_next_index_back(
    plane: Plane,
) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "cpu", replicas=1)
    edited = MachinePool.objects.get(pk=pool.pk)  # an edit (API, admin) reads the pool,
    machine_create(pool_id=pool.pk, index=0, name="cpu-0")  # a worker makes its machine,
    edited.replicas = 2
    edited.save()  # and the edit is saved, as the serializer and the admin save it

    assert MachinePool.objects.get(pk=pool.pk).next_index == 1
    plane.converge(cluster)
    assert sorted(Machine.objects.values_list("name", flat=True)) == ["cpu-0", "cpu-1"]


def test_a_lost_reserve_of_a_machine_force_deleted_meanwhile_is_resolved_by_observation(
    plane: Plane,
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    # The reserve's answer is lost (a 502: it never happened, but nobody can know yet).
    plane.sim.fault(operation="reserveAndAttachVGPUToVM", status=502, times=1)
    plane.reconcile(cluster)
    pending = VgpuReservation.objects.get()
    assert (pending.state, pending.vgpu_id) == (RState.RESERVING, None)
    machine_force_delete(
        machine=Machine.objects.get(), actor=SystemActor.RECONCILER, reason="stuck"
    )

    plane.observe()  # the reserve may still land: nothing decided
    assert VgpuReservation.objects.filter(pk=pending.pk, state=RState.RESERVING).exists()
    VgpuReservation.objects.filter(pk=pending.pk).update(reserve_deadline=timezone.now())
    plane.observe()  # a whole listing begun after it could land, without it

    assert not VgpuReservation.objects.filter(pk=pending.pk).exists()
    assert plane.sim_vgpus() == []


@contextmanager
def machine_deletes_cut() -> Iterator[None]:
    """Every DELETE of a machine row fails in the database, as a connection cut between a
    teardown's last statements would (a real trigger, on PostgreSQL)."""
    table = Machine._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION machine_delete_cut() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'connection cut'; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER machine_delete_cut BEFORE DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION machine_delete_cut()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER machine_delete_cut ON {table}")
            cursor.execute("DROP FUNCTION machine_delete_cut()")


@pytest.mark.django_db(transaction=True)
def test_a_teardown_cut_before_the_machine_row_goes_audits_the_delete_once_when_it_goes(
    plane: Plane, require_postgres: None
) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "cpu")
    plane.converge(cluster)
    assert Machine.objects.get().phase == Machine.Phase.RUNNING
    MachinePool.objects.filter(pk=pool.pk).update(replicas=0)

    with machine_deletes_cut():
        cut = []
        for _ in range(4):  # the VM stopped and deleted, then the row: cut, tried again
            plane.observe()
            try:
                plane.reconcile(cluster)
            except DatabaseError as exc:
                cut.append(str(exc).splitlines()[0])
        assert cut and set(cut) == {"connection cut"}, cut
        assert Machine.objects.filter(name="cpu-0").exists()
        # Not deleted, so not audited as deleted: the audit and the delete are one.
        assert not AuditEvent.objects.filter(action="machine.delete").exists()

    plane.converge(cluster)

    assert not Machine.objects.exists()
    assert AuditEvent.objects.filter(action="machine.delete").count() == 1


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def waits_on_a_lock(pid: int) -> bool:
    """Whether the database session `pid` is blocked by another one's lock now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid])
        return bool(cursor.fetchone()[0])


def until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first", ["observation", "delete"])
def test_a_machine_force_deleted_during_an_observation_leaves_no_reservation_pointing_at_it(
    plane: Plane, require_postgres: None, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """A force delete in another session, either after the observation read the account's
    machines (the delete waits for the pass) or in flight before it (the pass waits, and
    then does not see the machine): the pass commits, and no row names the gone machine."""
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=2)
    plane.converge(cluster)
    machine = Machine.objects.get()
    stale, missing = VgpuReservation.objects.filter(machine=machine, state=RState.ATTACHED)
    # Rows the pass writes naming the machine: one the listing corrects, one it makes.
    VgpuReservation.objects.filter(pk=stale.pk).update(state=RState.RESERVED)
    missing.delete()
    observer, person = backend_pid(), []
    deleted, done, observed = threading.Event(), threading.Event(), threading.Event()

    def force_delete(hold: bool) -> None:
        try:
            person.append(backend_pid())
            with transaction.atomic():
                machine_force_delete(machine=machine, actor=SystemActor.RECONCILER, reason="x")
                deleted.set()
                if hold:  # in flight until the observation waits for it (or is over)
                    until(lambda: observed.is_set() or waits_on_a_lock(observer), timeout=60)
        finally:
            done.set()
            connection.close()

    thread = threading.Thread(target=force_delete, args=(first == "delete",))
    if first == "delete":
        thread.start()
        assert deleted.wait(timeout=10)
    else:

        class OwnersThenDelete(VmOwners):
            def __init__(self, location: Location, **options: Any) -> None:
                super().__init__(location, **options)
                if location.name == NL and not thread.is_alive() and not done.is_set():
                    thread.start()
                    assert until(
                        lambda: done.is_set() or bool(person and waits_on_a_lock(person[0]))
                    )

        monkeypatch.setattr(observe, "VmOwners", OwnersThenDelete)
    started = timezone.now()
    try:
        plane.observe()  # raises if the pass rolled back
    finally:
        observed.set()
        thread.join(timeout=60)

    assert done.is_set() and not Machine.objects.filter(pk=machine.pk).exists()
    location = Location.objects.get(account=plane.account, name=NL)
    assert location.observation_started_at is not None
    assert location.observation_started_at >= started  # the pass committed
    rows = VgpuReservation.objects.filter(name__in=[stale.name, missing.name])
    assert sorted(rows.values_list("state", "machine_id")) == [(RState.ATTACHED, None)] * 2
    gone = VgpuReservation.objects.exclude(machine=None).exclude(
        machine_id__in=Machine.objects.values("pk")
    )
    assert not gone.exists()
