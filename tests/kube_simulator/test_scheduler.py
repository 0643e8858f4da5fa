"""The simulator's scheduler and kubelets (``--schedule``), held to the official client and
kubectl: a GPU pod goes where GPUs of its type are free, pods pack, a pod no node takes
says why as kube-scheduler words it, a bound pod runs and one with run-seconds finishes."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import requests

from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object

KUBECTL = "/usr/bin/kubectl"
GPU_TYPE = "capvco.io/gpu-type"


def wait_for(found: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = found()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def gpu_pod(
    name: str, gpus: int, gpu_type: str = "", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "1"}},
            }
        ]
    }
    if gpu_type:
        spec["nodeSelector"] = {GPU_TYPE: gpu_type}
    metadata = {"name": name, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@pytest.fixture
def cluster(scheduling: KubeSimulator) -> SimCluster:
    return scheduling.cluster("prod")


def node_of(core: kubernetes.client.CoreV1Api, name: str) -> str:
    return str(core.read_namespaced_pod(name, "default").spec.node_name or "")


def scheduled(core: kubernetes.client.CoreV1Api, name: str) -> Any:
    pod = core.read_namespaced_pod(name, "default")
    return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)


def test_a_gpu_pod_binds_to_a_node_with_free_gpus_of_its_type_and_the_watch_sees_it(
    scheduling: KubeSimulator, cluster: SimCluster, core: kubernetes.client.CoreV1Api
) -> None:
    scheduling.put(
        "prod",
        node_object("t4-0", gpus=4, labels={GPU_TYPE: "nvidia-t4"}),
        node_object("a100-0", gpus=1, labels={GPU_TYPE: "nvidia-a100"}),
        node_object("a100-1", gpus=2, labels={GPU_TYPE: "nvidia-a100"}),
    )
    core.create_namespaced_pod("default", gpu_pod("holder", 1, "nvidia-a100"))
    assert wait_for(lambda: node_of(core, "holder")) == "a100-0"  # full once there: packs
    since = core.list_namespaced_pod("default").metadata.resource_version
    bindings: list[str] = []

    def watch() -> None:
        for event in kubernetes.watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=since, timeout_seconds=10
        ):
            pod = event["object"]
            if pod.metadata.name == "train" and pod.spec.node_name:
                bindings.append(pod.spec.node_name)
                return

    watching = threading.Thread(target=watch)
    watching.start()
    core.create_namespaced_pod("default", gpu_pod("train", 1, "nvidia-a100"))
    watching.join(timeout=15)

    assert bindings == ["a100-1"]  # a100-0's one GPU is taken; t4-0's are of another type
    assert scheduled(core, "train").status == "True"
    running = wait_for(
        lambda: core.read_namespaced_pod("train", "default").status.phase == "Running"
    )
    assert running
    pod = core.read_namespaced_pod("train", "default")
    assert pod.status.start_time is not None
    assert [c.ready for c in pod.status.container_statuses] == [True]


def test_pods_pack_onto_the_most_allocated_node(
    scheduling: KubeSimulator, cluster: SimCluster, core: kubernetes.client.CoreV1Api
) -> None:
    scheduling.put(
        "prod",
        node_object("gpu-a", gpus=4, labels={GPU_TYPE: "nvidia-a100"}),
        node_object("gpu-b", gpus=4, labels={GPU_TYPE: "nvidia-a100"}),
    )
    core.create_namespaced_pod("default", gpu_pod("big", 2, "nvidia-a100"))
    assert wait_for(lambda: node_of(core, "big")) == "gpu-a"  # a tie: the first by name

    for n in range(3):
        core.create_namespaced_pod("default", gpu_pod(f"small-{n}", 1))
    placed = wait_for(lambda: all(node_of(core, f"small-{n}") for n in range(3)))

    assert placed
    on = sorted(node_of(core, f"small-{n}") for n in range(3))
    assert on == ["gpu-a", "gpu-a", "gpu-b"]  # gpu-a filled first, then gpu-b


def test_a_pod_no_node_takes_is_unschedulable_with_the_schedulers_message(
    scheduling: KubeSimulator, cluster: SimCluster, core: kubernetes.client.CoreV1Api
) -> None:
    scheduling.put(
        "prod",
        node_object("a100-0", gpus=1, labels={GPU_TYPE: "nvidia-a100"}),
        node_object("t4-0", gpus=1, labels={GPU_TYPE: "nvidia-t4"}),
        node_object("t4-1", gpus=1, labels={GPU_TYPE: "nvidia-t4"}),
    )
    core.create_namespaced_pod("default", gpu_pod("first", 1, "nvidia-a100"))
    assert wait_for(lambda: node_of(core, "first")) == "a100-0"

    core.create_namespaced_pod("default", gpu_pod("second", 1, "nvidia-a100"))
    told = wait_for(lambda: scheduled(core, "second"))

    assert (told.status, told.reason) == ("False", "Unschedulable")
    assert told.message == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match "
        "Pod's node affinity/selector. preemption: 0/3 nodes are available: 1 No preemption "
        "victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    )
    pod = core.read_namespaced_pod("second", "default")
    assert (pod.spec.node_name, pod.status.phase) == (None, "Pending")  # what the mirror reads


def test_a_cordoned_node_takes_nothing_until_uncordoned_with_kubectl(
    scheduling: KubeSimulator,
    cluster: SimCluster,
    core: kubernetes.client.CoreV1Api,
    tmp_path: Path,
) -> None:
    scheduling.put("prod", node_object("a100-0", gpus=2, labels={GPU_TYPE: "nvidia-a100"}))
    env = {"HOME": str(tmp_path), "KUBECONFIG": str(cluster.kubeconfig_file(tmp_path))}

    def kubectl(*args: str) -> str:
        done = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "node/a100-0 cordoned" in kubectl("cordon", "a100-0")
    core.create_namespaced_pod("default", gpu_pod("train", 1, "nvidia-a100"))
    told = wait_for(lambda: scheduled(core, "train"))
    assert told.message == (
        "0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are "
        "available: 1 Preemption is not helpful for scheduling."
    )

    assert "node/a100-0 uncordoned" in kubectl("uncordon", "a100-0")

    assert wait_for(lambda: node_of(core, "train")) == "a100-0"


def test_a_pod_with_run_seconds_runs_then_succeeds(
    scheduling: KubeSimulator, cluster: SimCluster, core: kubernetes.client.CoreV1Api
) -> None:
    scheduling.put("prod", node_object("a100-0", gpus=1, labels={GPU_TYPE: "nvidia-a100"}))
    began = time.monotonic()
    # 20 seconds, at ten times real time: 2.
    pod = gpu_pod("step", 1, annotations={"sim.capvco.io/run-seconds": "20"})
    core.create_namespaced_pod("default", pod)

    assert wait_for(lambda: core.read_namespaced_pod("step", "default").status.phase == "Running")
    done = wait_for(lambda: core.read_namespaced_pod("step", "default").status.phase == "Succeeded")

    assert done
    assert time.monotonic() - began >= 2.0
    (container,) = core.read_namespaced_pod("step", "default").status.container_statuses
    assert container.state.terminated.reason == "Completed"
    assert container.state.terminated.exit_code == 0
    # Its GPU is free again: the next pod asking for it is placed.
    core.create_namespaced_pod("default", gpu_pod("next", 1))
    assert wait_for(lambda: node_of(core, "next")) == "a100-0"


def test_a_job_pod_is_bound_but_started_by_the_job_simulation(
    scheduling: KubeSimulator, cluster: SimCluster, core: kubernetes.client.CoreV1Api
) -> None:
    scheduling.put("prod", node_object("n1", gpus=1))
    pod = gpu_pod("job-pod", 1)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-1", "controller": True}
    ]
    core.create_namespaced_pod("default", pod)

    assert wait_for(lambda: node_of(core, "job-pod")) == "n1"
    time.sleep(0.5)  # five times the start delay at this time scale
    assert core.read_namespaced_pod("job-pod", "default").status.phase == "Pending"


def test_taints_keep_pods_off_unless_tolerated_and_a_not_ready_node_takes_none(
    scheduling: KubeSimulator, cluster: SimCluster, core: kubernetes.client.CoreV1Api
) -> None:
    tainted = node_object("gpu-0", gpus=1)
    tainted["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    scheduling.put("prod", tainted, node_object("gpu-1", gpus=1, ready=False))
    core.create_namespaced_pod("default", gpu_pod("plain", 1))

    told = wait_for(lambda: scheduled(core, "plain"))

    assert told.message == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: "
        "}, 1 node(s) had untolerated taint {nvidia.com/gpu: true}. preemption: 0/2 nodes are "
        "available: 2 Preemption is not helpful for scheduling."
    )
    tolerating = gpu_pod("tolerating", 1)
    tolerating["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    core.create_namespaced_pod("default", tolerating)
    assert wait_for(lambda: node_of(core, "tolerating")) == "gpu-0"


def test_the_binding_subresource_binds_once_and_without_kubelets_an_eviction_deletes_at_once(
    kube_sim: KubeSimulator,
) -> None:
    other = kube_sim.cluster("manual")
    kube_sim.put("manual", pod_object("waiting", phase="Pending"))

    def post(path: str, body: dict[str, Any]) -> requests.Response:
        return requests.post(
            f"{other.server}/api/v1/namespaces/default/pods/waiting/{path}",
            json=body,
            headers={"Authorization": f"Bearer {other.token}"},
            verify=other.ca_file,
            timeout=10,
        )

    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "waiting"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}  # fmt: skip
    bound = post("binding", binding)
    again = post("binding", binding)

    assert bound.status_code == 201
    assert (again.status_code, again.json()["message"]) == (
        409,
        'Operation cannot be fulfilled on pods/binding "waiting": pod waiting is already '
        'assigned to node "n1"',
    )
    evicted = post("eviction", {"apiVersion": "policy/v1", "kind": "Eviction"})
    assert evicted.status_code == 201
    assert kube_sim.state("manual")["counts"]["pods"] == 0
