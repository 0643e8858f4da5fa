"""VMs that no machine owns are orphans too: flagged from complete listings, reported with
what is known of their cost, removed by the sweep after the grace period, never a VM of a
live machine."""

from __future__ import annotations

import json

from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.models import Account, VirtualMachine
from cloud.whitesky import whitesky_client
from clusters.models import ClusterSite, Machine, MachinePool
from clusters.services import machine_force_delete
from gpus.models import VgpuReservation
from tests.gpus.conftest import CLOUDSPACES, IMAGES, NL, Plane
from tests.gpus.support import auto_release_set, orphan_made, sweep
from tests.gpus.test_gpucheck import gpucheck


def vm_create(plane: Plane, name: str, location: str = NL) -> int:
    """A VM made outside the control plane (a stray duplicate create, a hand-made one)."""
    with whitesky_client(plane.account) as client:
        return client.create_vm(
            cloudspace_id=CLOUDSPACES[location],
            name=name,
            description="made by hand",
            vcpus=2,
            memory_mib=4096,
            image_id=IMAGES[location],
            disk_size_gib=20,
            start=False,
        )


def sim_vm_status(plane: Plane, vm_id: int) -> str | None:
    found = [vm["status"] for vm in plane.sim.state()["vms"] if vm["vm_id"] == vm_id]
    return found[0] if found else None


def flags(vm_id: int) -> tuple[bool, int]:
    vm = VirtualMachine.objects.get(vm_id=vm_id)
    return vm.orphaned_since is not None, vm.orphan_confirmations


def running_gpu_machine(plane: Plane) -> Machine:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    return Machine.objects.get(name="a100-0")


def test_stray_vm_named_by_us_is_flagged_reported_and_removed_after_confirmations(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, confirmations=2)
    machine = running_gpu_machine(plane)
    stray = vm_create(plane, "capvco-demo-gone-7")  # its machine does not exist

    plane.observe()
    assert flags(stray) == (True, 1)
    status, out = gpucheck("--orphans", "--json")
    assert status == 1
    [vm] = [o for o in json.loads(out)["orphans"] if o["kind"] == "vm"]
    assert (vm["name"], vm["location"], vm["vm_id"]) == ("capvco-demo-gone-7", NL, stray)
    # Just flagged: nothing accrued yet; what is priced and what is not is said.
    assert vm["accrued_cost"] == "0.00"
    assert vm["cost_note"] == "vCPUs and memory only: a VM's disks and IOPS are not listed with it"
    assert sweep(plane).removed == []  # one complete listing is not enough

    plane.observe()
    result = sweep(plane)

    assert result.removed == ["capvco-demo-gone-7"]
    assert sim_vm_status(plane, stray) in (None, "DESTROYED")
    event = AuditEvent.objects.get(action="vm.delete")
    assert (event.actor_name, event.before["vm_id"]) == ("orphan-sweep", stray)
    assert "no cluster of this account carries its name" in event.reason
    # The live machine, its VM and its vGPU were not touched.
    assert sim_vm_status(plane, machine.vm_id or 0) == "RUNNING"
    assert [v["vgpu_name"] for v in plane.sim_vgpus()] == ["capvco-demo-a100-0-gpu-0"]


def test_second_vm_named_like_a_live_machine_is_a_stray_duplicate_and_goes(plane: Plane) -> None:
    auto_release_set(plane.account, confirmations=1)
    machine = running_gpu_machine(plane)
    duplicate = vm_create(plane, machine.vm_name)

    plane.observe()

    assert flags(duplicate) == (True, 1)
    assert flags(machine.vm_id or 0) == (False, 0)
    reason = VirtualMachine.objects.get(vm_id=duplicate).orphan_reason
    assert reason == f"machine demo/a100-0 holds VM {machine.vm_id}, not this one"
    assert sweep(plane).removed == ["capvco-demo-a100-0"]
    assert sim_vm_status(plane, duplicate) in (None, "DESTROYED")
    assert sim_vm_status(plane, machine.vm_id or 0) == "RUNNING"
    assert len(plane.sim_vgpus()) == 1


def test_vm_of_a_live_machine_is_never_flagged_or_removed(plane: Plane) -> None:
    auto_release_set(plane.account, confirmations=1)
    machine = running_gpu_machine(plane)

    for _ in range(3):
        plane.observe()
        assert sweep(plane).removed == []

    assert flags(machine.vm_id or 0) == (False, 0)
    assert sim_vm_status(plane, machine.vm_id or 0) == "RUNNING"
    assert not AuditEvent.objects.filter(action="vm.delete").exists()


def test_vm_of_a_machine_that_has_not_recorded_its_vm_yet_is_not_an_orphan(
    plane: Plane,
) -> None:
    # A create whose answer was lost: the machine's vm_id is still empty, and the next
    # reconcile pass adopts the VM by its name.
    auto_release_set(plane.account, confirmations=1)
    cluster = plane.cluster()
    pool = plane.pool(cluster, "cpu", replicas=1)
    Machine.objects.create(pool=pool, name="cpu-0", index=0, phase=Machine.Phase.CREATING)
    vm_id = vm_create(plane, "capvco-demo-cpu-0")

    plane.observe()
    plane.observe()

    assert flags(vm_id) == (False, 0)
    assert sweep(plane).removed == []
    assert sim_vm_status(plane, vm_id) == "HALTED"


def test_force_deleted_machine_without_gpus_leaves_a_vm_the_sweep_removes(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, confirmations=2)
    cluster = plane.cluster()
    plane.pool(cluster, "cpu", replicas=1)
    plane.converge(cluster)
    machine = Machine.objects.get(name="cpu-0")
    vm_id = machine.vm_id or 0
    cluster.pools.update(replicas=0)  # no replacement machine in this test
    machine_force_delete(machine=machine, actor=SystemActor.RECONCILER, reason="stuck")

    plane.observe()
    plane.observe()
    result = sweep(plane)

    assert result.removed == ["capvco-demo-cpu-0"]
    assert sim_vm_status(plane, vm_id) in (None, "DESTROYED")
    assert plane.sim_vms() == []


def test_sweep_removes_the_orphan_vm_before_releasing_the_vgpus_it_held(plane: Plane) -> None:
    auto_release_set(plane.account, confirmations=1)
    machine = running_gpu_machine(plane)
    MachinePool.objects.filter(pk=machine.pool_id).update(replicas=0)
    machine_force_delete(machine=machine, actor=SystemActor.RECONCILER, reason="stuck")
    plane.observe()

    result = sweep(plane)

    assert result.removed == ["capvco-demo-a100-0"]
    assert result.released == ["capvco-demo-a100-0-gpu-0"]
    assert plane.sim_vms() == [] and plane.sim_vgpus() == []
    actions = list(AuditEvent.objects.order_by("pk").values_list("action", flat=True))
    assert actions[-2:] == ["vm.delete", "vgpu.release"]
    assert plane.unassigned_billed() == {}
    plane.observe()
    assert VgpuReservation.objects.get().state == VgpuReservation.State.RELEASED
    assert not VirtualMachine.objects.exists()


def test_failed_vm_listing_flags_nothing(plane: Plane) -> None:
    auto_release_set(plane.account, confirmations=1)
    running_gpu_machine(plane)
    plane.sim.fault(operation="listCloudspaceVirtualMachines", status=400)
    vm_create(plane, "capvco-demo-gone-7")

    plane.observe()

    assert not VirtualMachine.objects.filter(orphaned_since__isnull=False).exists()
    assert ClusterSite.objects.get(location__name=NL).observation_error
    assert sweep(plane).removed == []
    plane.sim.clear_faults()
    assert len(plane.sim_vms()) == 2


def test_due_orphan_vm_stays_while_the_location_is_partially_observed(plane: Plane) -> None:
    auto_release_set(plane.account, confirmations=1)
    stray = vm_create(plane, "capvco-demo-gone-7")
    plane.cluster()
    plane.observe()
    assert flags(stray) == (True, 1)  # due now

    plane.sim.fault(operation="listCustomerVGPUS", status=400)
    plane.observe()

    assert flags(stray) == (True, 1)
    assert sweep(plane).removed == []
    plane.sim.clear_faults()
    assert sim_vm_status(plane, stray) == "HALTED"
    assert not AuditEvent.objects.filter(action="vm.delete").exists()


def test_second_observation_of_unchanged_orphan_vms_writes_nothing(plane: Plane) -> None:
    auto_release_set(plane.account, confirmations=2)
    stray = vm_create(plane, "capvco-demo-gone-7")
    plane.cluster()
    plane.observe()
    plane.observe()
    before = VirtualMachine.objects.get(vm_id=stray).orphaned_since

    with CaptureQueriesContext(connection) as queries:
        plane.observe()

    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE"))
        and not q["sql"].startswith('UPDATE "cloud_location"')  # the pass's one stamp
    ]
    assert writes == []
    assert VirtualMachine.objects.get(vm_id=stray).orphaned_since == before


def test_an_orphan_vm_is_judged_against_the_clusters_of_its_whitesky_customer_only(
    plane: Plane,
) -> None:
    """`capvco-green-...` is another account of the same whitesky customer's (the same
    customer id, reached through another API host name: it sees the same cloudspaces):
    left alone. `capvco-blue-...` names a cluster of another customer only, whose VMs are
    never here: ours, and removed like any orphan."""
    auto_release_set(plane.account, confirmations=1)
    plane.cluster()  # the site whose cloudspace is listed
    same = Account.objects.create(
        name="same-customer", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id=plane.account.customer_id.upper(), credential="x",
    )  # fmt: skip
    same.clusters.create(name="green")
    elsewhere = Account.objects.create(
        name="elsewhere", api_url=plane.account.api_url, iam_url=plane.account.iam_url,
        customer_id="another-customer", credential="x",
    )  # fmt: skip
    elsewhere.clusters.create(name="blue")
    green, blue = vm_create(plane, "capvco-green-a-0"), vm_create(plane, "capvco-blue-a-0")

    plane.observe()
    assert flags(green)[0] and flags(blue)[0]
    result = sweep(plane)

    assert result.removed == ["capvco-blue-a-0"]
    assert sim_vm_status(plane, green) == "HALTED"
    assert sim_vm_status(plane, blue) in (None, "DESTROYED")


def test_the_location_plan_shows_the_sweep_and_the_sweep_does_exactly_that(
    plane: Plane, admin_user: User
) -> None:
    auto_release_set(plane.account, on=True, confirmations=1, grace_seconds=0)
    row = orphan_made(plane)
    location = plane.location(NL)
    api = APIClient()
    api.force_authenticate(admin_user)

    steps = api.get(f"/api/v1/locations/{location.pk}/plan/").json()

    vm = next(vm for vm in plane.sim_vms() if vm["name"] == "capvco-demo-a100-0")
    assert [(s["action"], s["target"]) for s in steps] == [
        ("remove_vm", "capvco-demo-a100-0"),
        ("release_vgpu", row.name),
    ]
    assert [c["verb"] for c in steps[0]["calls"]] == ["stopVirtualMachine", "deleteVirtualMachine"]
    assert steps[0]["vm"]["vm_id"] == vm["vm_id"]
    assert steps[1]["calls"] == [
        {"service": "whitesky", "verb": "deleteVGPU", "object": row.vgpu_id, "maybe": False}
    ]
    assert plane.sim_vgpus() != []  # a dry run

    plane.sim.clear_calls()
    sweep(plane)
    writes = [c for c in plane.sim.calls()["calls"] if c["method"] != "GET"]
    shown = [call["verb"] for step in steps for call in step["calls"]]
    assert [c["operation"] for c in writes] == shown  # the names the dry run gave
    assert writes[-1]["path"].endswith(f"/vgpus/{row.vgpu_id}")
    assert plane.sim_vgpus() == [] and plane.sim_vms() == []
