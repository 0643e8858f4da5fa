"""ADD and DEL of a pod's NIC, through the agent service, against the whitesky simulator
and the fake Kubernetes API over HTTP."""

from __future__ import annotations

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
    world.add("web")
    world.delete("web")
    calls = world.nic_calls()
    assert {c["operation"] for c in calls} >= {
        "attachExternalNetworksVirtualMachine",
        "detachExternalNetworksVirtualMachine",
    }
    assert {c["subject"] for c in world.sim.calls()["calls"]} == {SRIOV_SUBJECT}


def test_the_mirror_answers_for_known_pods_and_kubernetes_for_new_ones(world: World) -> None:
    import pytest

    from kube.client import kube_client
    from kube.observe import cluster_kube_observe
    from sriov.placement import CannotConfirm, WrongNode

    world.pod("known")
    with kube_client(world.cluster) as client:
        assert cluster_kube_observe(client=client, cluster=world.cluster).complete
    world.pod("new")
    world.kube.fault(operation="*", status=503)
    assert world.add("known").state == PodNic.State.ATTACHED  # no Kubernetes call needed
    with pytest.raises(CannotConfirm) as unsure:
        world.add("new")
    assert unsure.value.status == 503 and "Cannot confirm pod default/new" in unsure.value.message
    with pytest.raises(WrongNode):
        world.add("known", node=1)
    assert PodNic.objects.count() == 1


def test_a_second_interface_of_one_sandbox_is_refused(world: World) -> None:
    import pytest

    from sriov.agent import Refused

    world.pod("web")
    first = world.add("web", container_id="c1")
    with pytest.raises(Refused) as refused:
        world.add("web", container_id="c1", ifname="net2")
    assert "one SR-IOV NIC per pod" in refused.value.message
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [first.mac]


def test_a_new_sandbox_never_gets_a_second_nic_while_the_old_one_cannot_be_detached(
    world: World,
) -> None:
    """whitesky refuses the detach of the old sandbox's NIC: the new sandbox's ADD says
    so (the kubelet repeats it) and attaches nothing; once the detach goes through, the
    ADD gets its own NIC and the pod still has one."""
    import pytest

    from sriov.agent import Refused

    world.pod("web")
    old = world.add("web", container_id="c1")
    world.sim.fault(operation="detachExternalNetworksVirtualMachine", status=409, times=1)
    with pytest.raises(Refused):
        world.add("web", container_id="c2")
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [old.mac]
    assert PodNic.objects.exclude(state=PodNic.State.RELEASED).get().pk == old.pk

    new = world.add("web", container_id="c2")
    old.refresh_from_db()
    assert old.state == PodNic.State.RELEASED and "new sandbox" in old.release_reason
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [new.mac]
