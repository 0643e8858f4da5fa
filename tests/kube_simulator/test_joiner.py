"""The demo's joiner: whitesky VMs of a cluster become its nodes, which advertise their GPUs
only once the device plugin is applied to GPU-labelled nodes; demo pods wait for GPUs and
the scheduler places them where they are free."""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest

from simulator.kube.joiner import DEMO_NAMESPACE, cluster_join
from simulator.kube.scheduler import collect_orphans, schedule
from simulator.kube.store import ClusterState
from tests.kube_sim import KubeSimulator
from tests.whitesky_sim import WhiteskySimulator


def vm(vm_id: int, name: str, status: str = "RUNNING", gpus: int = 1) -> dict[str, Any]:
    return {
        "vm_id": vm_id, "name": name, "status": status, "cloudspace_id": "cs-1", "vcpus": 8,
        "memory": 16384, "vgpu_ids": [f"vgpu-{vm_id}-{n}" for n in range(gpus)],
    }  # fmt: skip


WORLD: dict[str, Any] = {
    "cloudspaces": [{"cloudspace_id": "cs-1", "location": "nl-1"}],
    "vms": [
        vm(100, "capvco-demo-a100-0"),
        vm(101, "capvco-demo-a100-1", status="HALTED"),
        vm(102, "capvco-demo-a100-2", status="DELETED"),
        vm(200, "capvco-other-a100-0"),
        vm(300, "unrelated"),
    ],
}


def nodes(state: ClusterState) -> dict[str, dict[str, Any]]:
    return {name: node for (_, name), node in state.objects[("", "nodes")].items()}


def pods(state: ClusterState) -> dict[str, tuple[str, str]]:
    return {
        name: (pod["spec"].get("nodeName", ""), pod["status"]["phase"])
        for (ns, name), pod in state.objects[("", "pods")].items()
        if ns == DEMO_NAMESPACE
    }


def plugin(state: ClusterState) -> None:
    state.put(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "capvco-nvidia-device-plugin", "namespace": "kube-system"},
            "spec": {
                "template": {
                    "spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}
                }
            },
        }
    )


def label(state: ClusterState, name: str, **labels: str) -> None:
    """The labels the control plane puts on a node: its GPU type, and once a pod was seen
    to use its GPUs, `capvco.io/gpu-verified`."""
    labels = labels or {"capvco.io/gpu-type": "nvidia-a100"}
    node = nodes(state)[name]
    node = {**node, "metadata": {**node["metadata"], "labels": {
        **node["metadata"]["labels"], **labels}}}  # fmt: skip
    state.put(node)


def verified(state: ClusterState, name: str) -> None:
    label(state, name, **{"capvco.io/gpu-verified": "true"})


def test_running_vms_of_the_cluster_join_and_advertise_gpus_only_with_the_plugin() -> None:
    state = ClusterState("demo", "token")

    cluster_join(state, WORLD)

    found = nodes(state)
    assert sorted(found) == ["capvco-demo-a100-0", "capvco-demo-a100-1"]
    node = found["capvco-demo-a100-0"]
    assert node["spec"]["providerID"] == "vco://nl-1/100"
    assert node["status"]["conditions"][0]["status"] == "True"
    assert found["capvco-demo-a100-1"]["status"]["conditions"][0]["status"] == "False"
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert set(pods(state).values()) == {("", "Pending")}

    plugin(state)
    cluster_join(state, WORLD)
    assert "nvidia.com/gpu" not in nodes(state)["capvco-demo-a100-0"]["status"]["allocatable"]

    label(state, "capvco-demo-a100-0")
    cluster_join(state, WORLD)
    node = nodes(state)["capvco-demo-a100-0"]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert node["metadata"]["labels"]["capvco.io/gpu-type"] == "nvidia-a100"  # kept
    schedule(state)
    assert set(pods(state).values()) == {("", "Pending")}  # demo pods ask for verified nodes
    verified(state, "capvco-demo-a100-0")
    cluster_join(state, WORLD)
    schedule(state)
    placed = pods(state)
    assert placed["train-a100-0"] == ("capvco-demo-a100-0", "Pending")  # bound, not started
    assert placed["train-a100-1"] == ("", "Pending")  # its one GPU is taken
    assert placed["train-big"] == placed["infer-t4-0"] == ("", "Pending")


def test_without_demo_pods_the_nodes_join_and_no_pod_is_made() -> None:
    state = ClusterState("demo", "token")

    cluster_join(state, WORLD, demo_pods=False)

    assert sorted(nodes(state)) == ["capvco-demo-a100-0", "capvco-demo-a100-1"]
    assert state.objects[("", "pods")] == {}


def test_a_pass_over_unchanged_vms_writes_nothing() -> None:
    state = ClusterState("demo", "token")
    cluster_join(state, WORLD)
    plugin(state)
    label(state, "capvco-demo-a100-0")
    cluster_join(state, WORLD)
    version = state.resource_version

    cluster_join(state, WORLD)

    assert state.resource_version == version


def test_a_vm_that_is_gone_takes_its_node_and_its_pods_wait_again() -> None:
    state = ClusterState("demo", "token")
    cluster_join(state, WORLD)
    plugin(state)
    label(state, "capvco-demo-a100-0")
    verified(state, "capvco-demo-a100-0")
    cluster_join(state, WORLD)
    schedule(state)
    assert pods(state)["train-a100-0"] == ("capvco-demo-a100-0", "Pending")

    gone = {**WORLD, "vms": WORLD["vms"][1:]}
    cluster_join(state, gone)
    collect_orphans(state)  # its pod goes with its node
    cluster_join(state, gone)

    assert sorted(nodes(state)) == ["capvco-demo-a100-1"]
    assert pods(state)["train-a100-0"] == ("", "Pending")


@pytest.fixture
def joining(whitesky_sim: WhiteskySimulator) -> Any:
    with KubeSimulator(
        extra_args=(
            "--cluster",
            "demo",
            "--join-whitesky",
            whitesky_sim.base_url,
            "--join-interval",
            "0.2",
        )
    ) as sim:
        yield sim


def test_the_process_joins_the_whitesky_simulators_vms(
    whitesky_sim: WhiteskySimulator, joining: KubeSimulator
) -> None:
    cloudspace = whitesky_sim.state()["cloudspaces"][0]
    whitesky_sim.seed(cloudspace["cloudspace_id"], vms=1, prefix="capvco-demo-a100")
    config = joining._control("GET", "clusters/demo")["kubeconfig"]
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config_dict(config))

    deadline = time.monotonic() + 10
    while not core.list_node().items and time.monotonic() < deadline:
        time.sleep(0.1)

    (node,) = core.list_node().items
    assert node.metadata.name == "capvco-demo-a100-vm-0"
    assert node.spec.provider_id.startswith(f"vco://{cloudspace['location']}/")
    assert node.status.conditions[0].status == "False"  # seeded halted
