"""One vocabulary for the calls a plan's steps show: a whitesky call is named by its
operationId in whitesky's API description, a Kubernetes call by its HTTP method and the
resource's path. Every branch of every step's `calls()` is built here."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from clusters.plan import Call, MachineTeardown, VgpuRelease, VgpuSlot, VmRemoval, VmReplace
from clusters.releases import SweepStep
from kube.plan import AddonApply, AddonRemove, NodeLabelsPatch
from sriov.reclaim_plan import LeakedNicDetach, PodNicDetach
from tests.integrations.whitesky.test_contract import spec_operations

NOW = datetime(2026, 12, 1, tzinfo=UTC)
KUBE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def every_step() -> list[object]:
    statuses = ("RUNNING", "HALTED", "", "DESTROYED")
    removals = [VmRemoval(7, "cs", "vm", status) for status in statuses]
    release = VgpuRelease(3, "vgpu-3", "capvco-demo-a100-0-0")
    made = VmReplace(
        target="a100-0", reason="its VM is gone", cluster_id=1, pool_id=1, machine_id=1,
        seen=NOW, vm_name="vm", create_vm=True, start_vm=True, card_id="card",
        reserve=(VgpuSlot(0, "g0"),), attach=("vgpu-1",), remove_vms=tuple(removals),
        spec=(("vcpus", 4),),
    )  # fmt: skip
    gone = MachineTeardown(
        target="a100-0", reason="scaled down", cluster_id=1, pool_id=1, machine_id=1,
        seen=NOW, vm_id=7, vm_name="vm", location="nl", release=(release,),
        remove_vms=tuple(removals),
    )  # fmt: skip
    sweeps = [
        SweepStep("release_vgpu", "g", "orphan", 1, vgpu_id="vgpu-2", vm=removals[0]),
        SweepStep("remove_vm", "vm", "orphan", 1, vm=removals[1]),
    ]
    nic = {"cloudspace_id": "cs", "vm_id": 7, "ip": "10.0.0.5", "reason": "gone"}
    pod_nic = {"pod_nic_id": 1, "pod": "ns/p", "state": "attached", "seen_at": NOW, **nic}
    nics = [
        PodNicDetach(mac="52:54:00:00:00:01", finds=False, **pod_nic),
        PodNicDetach(mac="", finds=True, **pod_nic),
        LeakedNicDetach(1, 1, network_id=2, mac="52:54:00:00:00:02", **nic),
    ]
    kube = [
        NodeLabelsPatch(1, 1, "n1", (("capvco.io/gpu-count", "1"),), (), NOW, "its machine"),
        AddonApply(1, "create", "d", "img", "", "", "none of ours"),
        AddonApply(1, "replace", "d", "img", "h", "41", "another manifest"),
        AddonRemove(1, "h", "off"),
    ]
    return [made, gone, *sweeps, *nics, *kube]


def test_every_whitesky_call_a_step_names_is_an_operation_of_the_api_description() -> None:
    calls = [call for step in every_step() for call in step.calls()]  # type: ignore[attr-defined]
    whitesky = {call.verb for call in calls if call.service == "whitesky"}

    assert whitesky - set(spec_operations()) == set()
    assert whitesky == {
        "createVirtualMachine", "startVirtualMachine", "stopVirtualMachine",
        "deleteVirtualMachine", "reserveAndAttachVGPUToVM", "attachVGPUToVM", "deleteVGPU",
        "listExternalNetworksVirtualMachine", "detachExternalNetworksVirtualMachine",
    }  # fmt: skip
    for call in calls:
        if call.service == "kubernetes":
            assert call.verb in KUBE_METHODS and call.object.startswith("/api"), call


def test_a_call_named_otherwise_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="stop_vm: not an operationId"):
        Call("stop_vm", "7")
    assert str(Call("PATCH", "/api/v1/nodes/n1", service="kubernetes")) == (
        "kubernetes PATCH /api/v1/nodes/n1"
    )
