"""The simulator's Jobs (``--schedule``), held to the official client and kubectl: a Job's
pod runs nvidia-smi on its node and its log is what real nvidia-smi prints for the node's
GPUs; a node that lies (another model, a GPU missing, another or no driver) is seen so; a
pod that cannot start says why as the kubelet does; the Job ends Complete or Failed, and
its pod goes with it."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from gpus.probe import COMMAND, parse_query
from tests.kube_sim import KubeSimulator, SimCluster, node_object

KUBECTL = "/usr/bin/kubectl"
NODE = "gpu-0"
H200_RECORDED = Path(__file__).resolve().parents[2].parent / "shared/gpu-node"


def wait_for(found: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = found()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.fixture
def cluster(scheduling: KubeSimulator) -> SimCluster:
    return scheduling.cluster("prod")


@pytest.fixture
def batch(api_client: kubernetes.client.ApiClient) -> kubernetes.client.BatchV1Api:
    return kubernetes.client.BatchV1Api(api_client)


def gpu_node(scheduling: KubeSimulator, gpus: int = 2, **annotations: str) -> None:
    node = node_object(NODE, gpus=gpus, labels={"nvidia.com/gpu.product": "NVIDIA-H200"})
    node["metadata"]["annotations"] = {f"sim.capvco.io/{k.replace('_', '-')}": v
                                       for k, v in annotations.items()}  # fmt: skip
    scheduling.put("prod", node)


def probe_job(name: str = "probe", gpus: int = 2, deadline: int = 30) -> dict[str, Any]:
    container = {
        "name": "probe",
        "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        "command": shlex.split(COMMAND),
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "template": {
                "spec": {"nodeName": NODE, "restartPolicy": "Never", "containers": [container]}
            },
        },
    }


def ended(batch: kubernetes.client.BatchV1Api, name: str = "probe") -> Any:
    def condition() -> Any:
        job = batch.read_namespaced_job(name, "default")
        return next(
            (
                c
                for c in (job.status and job.status.conditions) or []
                if c.type in ("Complete", "Failed")
            ),
            None,
        )

    return wait_for(condition)


def pod_of(core: kubernetes.client.CoreV1Api, job: str = "probe") -> Any:
    pods = core.list_namespaced_pod("default", label_selector=f"job-name={job}").items
    return pods[0] if pods else None


def test_a_jobs_pod_prints_what_nvidia_smi_prints_for_the_nodes_gpus(
    scheduling: KubeSimulator,
    batch: kubernetes.client.BatchV1Api,
    core: kubernetes.client.CoreV1Api,
) -> None:
    gpu_node(scheduling, gpus=2)
    batch.create_namespaced_job("default", probe_job())

    assert ended(batch).type == "Complete"
    pod = pod_of(core)
    assert pod.status.phase == "Succeeded"
    assert pod.metadata.owner_references[0].kind == "Job"
    text = core.read_namespaced_pod_log(pod.metadata.name, "default")
    seen = parse_query(text)
    assert [(g.index, g.name, g.driver_version) for g in seen] == [
        (0, "NVIDIA H200", "550.127.05"),
        (1, "NVIDIA H200", "550.127.05"),
    ]
    assert seen[0].memory_mib == 143771  # the H200 recorded on a real node
    # Exactly real nvidia-smi's format: the recorded line, field for field where they agree.
    recorded = (H200_RECORDED / "query-gpu-noheader.csv").read_text().strip().split(", ")
    line = text.splitlines()[0].split(", ")
    assert (line[0], line[1], recorded[0], recorded[1]) == ("0", "NVIDIA H200", "0", "NVIDIA H200")
    assert line[2].startswith("GPU-") and len(line[2]) == len(recorded[2])
    assert len(line[3]) == len(recorded[3])  # 00000000:06:00.0


@pytest.mark.parametrize(
    ("annotations", "seen"),
    [
        ({"gpu_model": "NVIDIA A10"}, [("NVIDIA A10", "550.127.05")] * 2),
        ({"gpus_hidden": "1"}, [("NVIDIA H200", "550.127.05")]),
        ({"driver": "525.60.13"}, [("NVIDIA H200", "525.60.13")] * 2),
    ],
)
def test_a_node_that_lies_is_seen_so(
    scheduling: KubeSimulator,
    batch: kubernetes.client.BatchV1Api,
    core: kubernetes.client.CoreV1Api,
    annotations: dict[str, str],
    seen: list[tuple[str, str]],
) -> None:
    gpu_node(scheduling, gpus=2, **annotations)
    batch.create_namespaced_job("default", probe_job())

    assert ended(batch).type == "Complete"
    text = core.read_namespaced_pod_log(pod_of(core).metadata.name, "default")
    assert [(g.name, g.driver_version) for g in parse_query(text)] == seen


def test_no_driver_fails_the_pod_with_nvidia_smis_own_words(
    scheduling: KubeSimulator,
    batch: kubernetes.client.BatchV1Api,
    core: kubernetes.client.CoreV1Api,
) -> None:
    gpu_node(scheduling, driver="none")
    batch.create_namespaced_job("default", probe_job())

    failed = ended(batch)
    assert (failed.type, failed.reason) == ("Failed", "BackoffLimitExceeded")
    pod = pod_of(core)
    assert pod.status.container_statuses[0].state.terminated.exit_code == 9
    log = core.read_namespaced_pod_log(pod.metadata.name, "default")
    assert "couldn't communicate with the NVIDIA driver" in log


def test_a_pod_asking_for_gpus_the_node_has_not_free_is_rejected_as_the_kubelet_does(
    scheduling: KubeSimulator,
    batch: kubernetes.client.BatchV1Api,
    core: kubernetes.client.CoreV1Api,
) -> None:
    gpu_node(scheduling, gpus=2)
    holder = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
        "spec": {"nodeName": NODE, "containers": [
            {"name": "main", "image": "busybox",
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip
    core.create_namespaced_pod("default", holder)
    assert wait_for(lambda: core.read_namespaced_pod("holder", "default").status.phase == "Running")
    batch.create_namespaced_job("default", probe_job(gpus=2))

    assert ended(batch).type == "Failed"
    pod = pod_of(core)
    assert (pod.status.phase, pod.status.reason) == ("Failed", "OutOfnvidia.com/gpu")
    assert pod.status.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        "requested: 2, used: 1, capacity: 2"
    )


def test_an_image_not_pulled_waits_and_its_log_says_so_until_the_deadline_fails_the_job(
    scheduling: KubeSimulator,
    batch: kubernetes.client.BatchV1Api,
    core: kubernetes.client.CoreV1Api,
) -> None:
    gpu_node(scheduling, pod_start="ErrImagePull")
    batch.create_namespaced_job("default", probe_job(deadline=3))

    pod = wait_for(lambda: (p := pod_of(core)) and p.status.container_statuses and p)
    waiting = pod.status.container_statuses[0].state.waiting
    assert waiting.reason == "ErrImagePull"
    with pytest.raises(kubernetes.client.ApiException) as refused:
        core.read_namespaced_pod_log(pod.metadata.name, "default")
    assert refused.value.status == 400
    assert json.loads(refused.value.body)["message"] == (
        f'container "probe" in pod "{pod.metadata.name}" is waiting to start: ErrImagePull'
    )
    failed = ended(batch)
    assert (failed.type, failed.reason) == ("Failed", "DeadlineExceeded")
    assert wait_for(lambda: pod_of(core) is None)  # its pod went with the deadline


def test_deleting_a_job_deletes_its_pod_and_kubectl_reads_jobs_and_logs(
    scheduling: KubeSimulator,
    cluster: SimCluster,
    batch: kubernetes.client.BatchV1Api,
    core: kubernetes.client.CoreV1Api,
    tmp_path: Path,
) -> None:
    gpu_node(scheduling, gpus=1)
    batch.create_namespaced_job("default", probe_job(gpus=1))
    assert ended(batch).type == "Complete"
    kubeconfig = cluster.kubeconfig_file(tmp_path)

    def kubectl(*args: str) -> str:
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "probe" in kubectl("get", "jobs")
    assert kubectl("logs", "job/probe").startswith("0, NVIDIA H200, GPU-")

    batch.delete_namespaced_job("probe", "default", propagation_policy="Background")

    assert wait_for(lambda: pod_of(core) is None)
