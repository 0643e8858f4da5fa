"""GPU verification end to end through the fake Kubernetes API's own Jobs: its Job
controller makes the verification pod, its kubelet admits it and "runs" nvidia-smi on the
node, and the control plane reads the pod's log through `pods/log`, as it would read a
real node's (the simulator prints what real nvidia-smi prints, simulator/kube/guest.py).
The node lies through its annotations: another model, a GPU missing, an old or no
driver, an image that cannot be pulled, GPUs already held."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from clusters.models import Cluster, MachinePool
from kube.models import GpuVerification
from kube.tasks import observe_cluster_kube
from tests.kube.test_gpu_verify import GPU_0, gpus, verify_on
from tests.kube_sim import KubeSimulator, node_object

__all__ = ["gpus", "verify_on"]
Status = GpuVerification.Status


@pytest.fixture(scope="module")
def kubelets_process() -> Iterator[KubeSimulator]:
    """A fake API whose scheduler, kubelets and Job controller run, ten times faster."""
    with KubeSimulator(extra_args=("--schedule", "--time-scale", "10")) as simulator:
        yield simulator


@pytest.fixture
def node(kubelets_process: KubeSimulator, pool: MachinePool, gpus: None, verify_on: None) -> Any:
    """Put the pool's first machine's node, T4 x 1, lying as each test asks."""
    kubelets_process.reset()
    found = kubelets_process.cluster("prod")
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)

    def put(annotations: dict[str, str] | None = None, gpus: int = 1) -> None:
        obj = node_object(
            GPU_0, provider_id="vco://nl-1/100", gpus=gpus,
            labels={"nvidia.com/gpu.product": "Tesla-T4"},
        )  # fmt: skip
        obj["metadata"]["annotations"] = annotations or {}
        kubelets_process.put("prod", obj)

    put.api = kubernetes.client.CoreV1Api(  # type: ignore[attr-defined]
        kubernetes.config.new_client_from_config_dict(found.kubeconfig)
    )
    return put


def verified(pool: MachinePool, seconds: float = 15.0) -> GpuVerification:
    """Observe until the node's verification has its verdict (the Job runs meanwhile)."""
    deadline = time.monotonic() + seconds
    while True:
        observe_cluster_kube(pool.cluster_id)
        found = GpuVerification.objects.order_by("-pk").first()
        if found is not None and found.finished_at is not None:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"no verdict after {seconds} s: {found and found.status}")
        time.sleep(0.2)


def jobs_left(node: Any) -> list[str]:
    api = kubernetes.client.BatchV1Api(node.api.api_client)
    return [j.metadata.name for j in api.list_namespaced_job("capvco-gpu-verify").items]


def test_a_node_whose_pod_sees_the_billed_gpu_is_verified(node: Any, pool: MachinePool) -> None:
    node()

    verification = verified(pool)

    assert (verification.status, verification.reasons) == (Status.VERIFIED, [])
    (gpu,) = verification.gpus
    assert (gpu["model"], gpu["memory_mib"], gpu["driver"]) == (
        "Tesla T4",
        15360,
        "550.127.05",
    )
    assert gpu["uuid"].startswith("GPU-")
    observe_cluster_kube(pool.cluster_id)  # the next pass removes the Job it read
    assert jobs_left(node) == []


@pytest.mark.parametrize(
    ("annotations", "gpus", "driver", "said"),
    [
        ({"sim.capvco.io/gpu-model": "NVIDIA A10"}, 1, "", "the node sees 1 x NVIDIA A10"),
        ({}, 2, "", "the node sees 2 x Tesla T4"),
        ({}, 1, "560.35.03", "older than the pool's 560.35.03"),
    ],
    ids=["model", "count", "driver"],
)
def test_a_node_whose_pod_sees_other_gpus_than_billed_is_a_mismatch_with_both_sides(
    node: Any,
    pool: MachinePool,
    annotations: dict[str, str],
    gpus: int,
    driver: str,
    said: str,
) -> None:
    MachinePool.objects.filter(pk=pool.pk).update(gpu_driver_version=driver)
    node(annotations, gpus=gpus)

    verification = verified(pool)

    assert verification.status == Status.MISMATCH
    assert any(said in reason for reason in verification.reasons), verification.reasons


@pytest.mark.parametrize(
    ("annotations", "said"),
    [
        ({"sim.capvco.io/driver": "none"}, "couldn't communicate with the NVIDIA driver"),
        ({"sim.capvco.io/gpus-hidden": "1"}, "No devices were found"),
        ({"sim.capvco.io/pod-start": "ErrImagePull"}, "DeadlineExceeded"),
    ],
    ids=["no-driver", "no-device", "image-not-pulled"],
)
def test_a_pod_that_could_not_use_the_gpus_fails_the_verification_with_its_own_reason(
    node: Any, pool: MachinePool, settings: Any, annotations: dict[str, str], said: str
) -> None:
    settings.GPU_VERIFY_TIMEOUT_SECONDS = 20  # 2 s at the fake's time scale
    node(annotations)

    verification = verified(pool)

    assert verification.status == Status.FAILED
    assert any(said in reason for reason in verification.reasons), verification.reasons
