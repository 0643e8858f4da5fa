"""ADD and DEL of a pod's NIC, through the agent service, against the whitesky simulator
and the fake Kubernetes API over HTTP."""

from __future__ import annotations

from sriov.agent import pod_nic_delete
from sriov.models import PodNic
from tests.sriov.support import NETWORK_ID, SRIOV_SUBJECT, World


def test_add_attaches_a_nic_on_the_pods_vm_and_answers_its_address(world: World) -> None:
    world.pod("web")
    nic = world.add("web")
    assert nic.state == PodNic.State.ATTACHED
    assert nic.vm_id == world.vm(0)
    assert nic.network_id == NETWORK_ID
    listed = world.sim_nics(world.vm(0))
    assert [(n["mac_address"], n["ip_address"]) for n in listed] == [(nic.mac, nic.ip)]
    assert (nic.prefix_len, nic.gateway, nic.mtu) == (24, "10.50.0.1", 1500)


def test_nic_calls_are_made_with_the_sriov_credential_only(world: World) -> None:
    world.pod("web")
    world.sim.clear_calls()
    nic = world.add("web")
    pod_nic_delete(cluster=world.cluster, pod_uid=nic.pod_uid)
    calls = world.nic_calls()
    assert {c["operation"] for c in calls} >= {
        "attachExternalNetworksVirtualMachine",
        "detachExternalNetworksVirtualMachine",
    }
    assert {c["subject"] for c in world.sim.calls()["calls"]} == {SRIOV_SUBJECT}
