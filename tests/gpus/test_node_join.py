"""A machine the reconciler started, and the node its VM should become: whitesky and the
fake Kubernetes API together, over HTTP."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from clusters.models import Cluster, Machine
from kube.client import kube_client
from kube.models import ClusterObservation, KubeNode, MachineNode
from kube.nodes import provider_id
from kube.observe import cluster_kube_observe
from kube.tasks import observe_kube_all
from tests.gpus.conftest import NL, Plane
from tests.kube_sim import KubeSimulator, node_object


def test_a_started_machine_whose_node_never_joins_is_flagged_until_it_joins(
    plane: Plane, kube_sim: KubeSimulator, settings: Any
) -> None:
    settings.NODE_JOIN_TIMEOUT_SECONDS = 900
    cluster = plane.cluster("prod", sites=(NL,))
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    machine = Machine.objects.get(pool__cluster=cluster)
    assert machine.phase == Machine.Phase.RUNNING and machine.vm_started_at is not None
    Cluster.objects.filter(pk=cluster.pk).update(
        kubeconfig=kube_sim.cluster("prod").kubeconfig_yaml
    )

    def observe() -> MachineNode:
        found = Cluster.objects.get(pk=cluster.pk)
        with kube_client(found) as client:
            cluster_kube_observe(client=client, cluster=found)
        return MachineNode.objects.filter(machine=machine).first() or MachineNode()

    assert not observe().missing  # just started: its node has time to join
    Machine.objects.filter(pk=machine.pk).update(
        vm_started_at=machine.vm_started_at - timedelta(minutes=16)
    )
    assert observe().missing

    # The cloud provider sets the providerID from the VM's id: that names the machine.
    assert machine.vm_id is not None
    node = node_object("worker-1", provider_id=provider_id(NL, machine.vm_id), gpus=1)
    kube_sim.put("prod", node)
    joined = observe()
    assert (joined.missing, joined.missing_reason) == (False, "")
    assert machine.kube_nodes.get().name == "worker-1"


def test_the_kubernetes_observe_tick_observes_each_cluster_with_a_kubeconfig(
    plane: Plane, kube_sim: KubeSimulator, run_tasks: Any
) -> None:
    cluster = plane.cluster("prod", sites=(NL,))
    plane.cluster("bare", sites=(NL,))  # no kubeconfig: its Kubernetes is not read
    Cluster.objects.filter(pk=cluster.pk).update(
        kubeconfig=kube_sim.cluster("prod").kubeconfig_yaml
    )
    kube_sim.put("prod", node_object("worker-1"))

    with run_tasks():
        observe_kube_all.delay()

    assert list(KubeNode.objects.values_list("cluster__name", "name")) == [("prod", "worker-1")]
    assert ClusterObservation.objects.get(cluster=cluster).complete
    assert {c["cluster"] for c in kube_sim.calls()} == {"prod"}
