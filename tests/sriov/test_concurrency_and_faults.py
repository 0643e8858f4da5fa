"""One attach at a time per VM, whatever the number of ADDs (and queue runs) at once; a
lost answer resolves to exactly one NIC; a refusal by whitesky is said, and the VM left
running."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections

from cloud.whitesky import whitesky_client
from sriov.agent import Refused, WhiteskyFailed, WhiteskyRefused
from sriov.models import PodNic
from tests.sriov.support import CLOUDSPACE, World

ATTACH = "attachExternalNetworksVirtualMachine"
LIST = "listExternalNetworksVirtualMachine"


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads released together; their results or exceptions."""
    results: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def run_queue(world: World) -> Callable[[], Any]:
    from sriov.agent import vm_queue_run

    return lambda: vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))


def test_ten_adds_on_one_vm_are_serialised_into_ten_distinct_nics(world_tx: World) -> None:
    world = world_tx
    names = [f"pod-{i}" for i in range(10)]
    for name in names:
        world.pod(name)
    requests = at_once([lambda n=name: world.request(n) for name in names])
    assert all(isinstance(r, PodNic) for r in requests), requests
    # Four workers run the VM's queue at once: one of them attaches, one at a time.
    runs = at_once([run_queue(world) for _ in range(4)])
    assert not any(isinstance(r, Exception) for r in runs), runs
    rows = list(PodNic.objects.order_by("attach_started_at"))
    assert [r.state for r in rows] == [PodNic.State.ATTACHED] * 10
    assert len({r.mac for r in rows}) == len({r.ip for r in rows}) == 10
    on_vm = world.sim_nics(world.vm(0))
    assert sorted(n["mac_address"] for n in on_vm) == sorted(r.mac for r in rows)
    # Serialised: each attach began after the one before it had found its NIC.
    for before, after in itertools.pairwise(rows):
        assert before.attached_at is not None and after.attach_started_at is not None
        assert before.attached_at <= after.attach_started_at
    # In the order they were queued.
    assert [r.pk for r in rows] == [r.pk for r in PodNic.objects.order_by("queued_at", "pk")]
    attaches = [c for c in world.sim.calls()["calls"] if c["operation"] == ATTACH]
    assert len(attaches) == 10


def test_adds_of_one_pod_at_once_get_the_same_nic(world_tx: World) -> None:
    world = world_tx
    world.pod("web")
    requests = at_once([lambda: world.request("web") for _ in range(5)])
    assert all(isinstance(r, PodNic) for r in requests), requests
    assert len({r.pk for r in requests}) == 1
    at_once([run_queue(world) for _ in range(3)])
    row = PodNic.objects.get()
    assert row.state == PodNic.State.ATTACHED
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [row.mac]
    results = at_once([lambda: world.add("web") for _ in range(5)])
    assert {r.mac for r in results} == {row.mac}  # a repeated ADD: the same NIC


def test_a_lost_attach_answer_resolves_to_exactly_one_nic(world: World) -> None:
    world.pod("web")
    # The attach lands but its answer is lost, and the listings after it fail: the ADD
    # cannot tell, and says so.
    world.sim.fault(operation=ATTACH, lost_response="drop", times=1)
    world.sim.fault(operation=LIST, status=400, skip=2)
    with pytest.raises(WhiteskyFailed):
        world.add("web")
    row = PodNic.objects.get()
    assert row.state == PodNic.State.ATTACHING
    assert row.mac == ""
    assert len(world.sim_nics(world.vm(0))) == 1
    world.sim.clear_faults()
    nic = world.add("web")  # the plugin's retry
    assert nic.state == PodNic.State.ATTACHED
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [nic.mac]
    assert len([c for c in world.sim.calls()["calls"] if c["operation"] == ATTACH]) == 1


def test_an_attach_that_failed_before_acting_is_sent_again_once(world: World) -> None:
    world.pod("web")
    world.sim.fault(operation=ATTACH, status=504, times=1)  # answered without acting
    with pytest.raises(WhiteskyFailed):
        world.add("web")
    assert world.sim_nics(world.vm(0)) == []
    # Within its outcome window it may still land: not sent again.
    with pytest.raises(WhiteskyFailed, match="waiting until its outcome is settled"):
        world.add("web")
    assert len([c for c in world.sim.calls()["calls"] if c["operation"] == ATTACH]) == 1
    since = PodNic.objects.get().attach_started_at
    assert since is not None
    PodNic.objects.update(attach_started_at=since - timedelta(hours=1))  # the window passed
    nic = world.add("web")
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [nic.mac]


def test_a_del_during_a_lost_attach_detaches_what_it_made(world: World) -> None:
    world.pod("web")
    world.sim.fault(operation=ATTACH, lost_response="drop", times=1)
    world.sim.fault(operation=LIST, status=400, skip=2, times=1)
    with pytest.raises(WhiteskyFailed):
        world.add("web")
    world.sim.clear_faults()
    row = world.delete("web")
    assert row is not None and row.state == PodNic.State.RELEASED
    assert world.sim_nics(world.vm(0)) == []


def test_a_refused_attach_on_a_running_vm_is_said_and_the_vm_keeps_running(
    world: World,
) -> None:
    with whitesky_client(world.account) as client:
        client.start_vm(cloudspace_id=CLOUDSPACE, vm_id=world.vm(0))
    world.sim.configure(nic_attach_requires_halted_vm=True)
    world.pod("web")
    with pytest.raises(WhiteskyRefused) as refused:
        world.add("web")
    assert refused.value.status == 409
    assert f"refused to attach a NIC to VM {world.vm(0)}" in refused.value.message
    assert "never stopped" in refused.value.message
    row = PodNic.objects.get()
    assert row.state == PodNic.State.FAILED
    assert "refused to attach" in row.failure
    vms = {vm["vm_id"]: vm for vm in world.sim.state()["vms"]}
    assert vms[world.vm(0)]["status"] == "RUNNING"
    calls = {c["operation"] for c in world.sim.calls()["calls"]}
    assert "stopVirtualMachine" not in calls


def test_a_refused_detach_keeps_the_nic_detaching_and_says_why(world: World) -> None:
    with whitesky_client(world.account) as client:
        client.start_vm(cloudspace_id=CLOUDSPACE, vm_id=world.vm(0))
    world.pod("web")
    world.add("web")
    world.sim.configure(nic_detach_requires_halted_vm=True)
    with pytest.raises(Refused) as refused:
        world.delete("web")
    assert refused.value.status == 409
    row = PodNic.objects.get()
    assert row.failure_code == "whitesky_refused" and row.detach_queued_at is None
    assert row.state == PodNic.State.DETACHING
    assert "refused to detach" in row.failure
    assert len(world.sim_nics(world.vm(0))) == 1


def test_a_queue_run_while_a_detach_holds_the_vm_leaves_its_requests_queued(
    world: World,
) -> None:
    from capvco_web.locks import object_lock
    from sriov.agent import vm_lock_name, vm_queue_run

    world.pod("web")
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with object_lock(vm_lock_name(world.location.pk, world.vm(0))) as taken:
            assert taken
            held.set()
            release.wait(10)
        connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    try:
        world.request("web")
        result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    finally:
        release.set()
        thread.join()
    assert result.busy and result.again and result.attached == []  # its task tries again
    row = PodNic.objects.get()
    assert row.state == PodNic.State.REQUESTED  # visible in the VM's queue
    assert world.nic_calls() == []
    assert world.add("web").state == PodNic.State.ATTACHED


def _windows(vm_id: int) -> list[tuple[Any, Any]]:
    """The VM's attaches as [attach sent, NIC found], in order."""
    rows = PodNic.objects.filter(vm_id=vm_id).order_by("attach_started_at")
    assert [r.state for r in rows] == [PodNic.State.ATTACHED] * len(rows)
    return [(r.attach_started_at, r.attached_at) for r in rows]


def _overlap(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    return bool(a[0] < b[1] and b[0] < a[1])


def test_one_run_attaches_two_vms_at_once_and_each_vm_one_at_a_time(world_tx: World) -> None:
    from sriov.agent import vm_queues_run

    world = world_tx
    for name, node in (("a0", 0), ("a1", 0), ("b0", 1), ("b1", 1)):
        world.pod(name, node=node)
        world.request(name, node=node)
    # Each attach takes 300 ms: long enough that two VMs' runs overlap if they run at once.
    world.sim.fault(operation=ATTACH, latency_ms=300)
    results = vm_queues_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert {vm: len(r.attached) for vm, r in results.items()} == {world.vm(0): 2, world.vm(1): 2}
    first, second = _windows(world.vm(0)), _windows(world.vm(1))
    # One VM: one attach at a time (the second sent after the first found its NIC).
    assert not _overlap(*first) and not _overlap(*second)
    # Two VMs: at once.
    assert any(_overlap(a, b) for a in first for b in second)


def test_the_accounts_call_slots_bound_the_vms_attaching_at_once(
    world_tx: World, settings: Any
) -> None:
    from sriov.agent import vm_queues_run

    settings.WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT = 1
    world = world_tx
    for name, node in (("a0", 0), ("b0", 1)):
        world.pod(name, node=node)
        world.request(name, node=node)
    world.sim.fault(operation=ATTACH, latency_ms=300)
    results = vm_queues_run(location_id=world.location.pk, vm_id=world.vm(1))
    # Both attached by the one runner its one slot allows, the asked-for VM first.
    assert [vm for vm, r in results.items() if r.attached] == [world.vm(1), world.vm(0)]
    assert not _overlap(_windows(world.vm(0))[0], _windows(world.vm(1))[0])


def test_a_run_with_no_call_slot_free_attaches_nothing_and_says_busy(
    world_tx: World, settings: Any
) -> None:
    from capvco_web.worker_slots import account_calls_slot
    from sriov.agent import vm_queues_run

    settings.WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT = 1
    world = world_tx
    world.pod("a0")
    world.request("a0")
    # The account's one slot is held (by a machine step, on a connection of its own).
    held = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with account_calls_slot(world.account.pk):
            held.set()
            done.wait(30)
        connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        results = vm_queues_run(location_id=world.location.pk, vm_id=world.vm(0))
    finally:
        done.set()
        holder.join(30)
    assert results[world.vm(0)].busy and not results[world.vm(0)].attached
    assert PodNic.objects.get().state == PodNic.State.REQUESTED
