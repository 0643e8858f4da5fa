"""A worker SIGKILLed between making a node's verification Job and reading its pod's log:
a worker started after it ends the verification with one verdict and no Job left, the
real Celery worker and beat against the fake Kubernetes API's own Jobs and kubelet."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from clusters.models import Cluster, MachinePool
from kube.models import GpuVerification
from tests.clusters.conftest import pool, site
from tests.e2e.processes import broker_flush, celery_worker, worker_kill
from tests.kube.test_gpu_verify import GPU_0, gpus
from tests.kube_sim import KubeSimulator, node_object

__all__ = ["gpus", "pool", "site"]
pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
WORKER = {"GPU_VERIFY": "true", "OBSERVE_INTERVAL_SECONDS": "2"}
# Processes enough that the cluster's Kubernetes pass never waits behind the whitesky
# observations of the test's account, whose API nobody serves (each retried, then failed).
POOL = ("--pool", "prefork", "--concurrency", "3")
Status = GpuVerification.Status


def wait_for(found: Callable[[], Any], seconds: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := found():
            return value
        time.sleep(0.02)
    pytest.fail(f"no {what} after {seconds} s\n{log.read_text()[-3000:] if log.exists() else ''}")


@pytest.fixture
def kubelets() -> Iterator[KubeSimulator]:
    with KubeSimulator(extra_args=("--schedule", "--time-scale", "10")) as simulator:
        yield simulator


def test_a_worker_killed_between_the_job_and_its_log_leaves_one_verdict_and_no_job(
    tmp_path: Path, require_postgres: None, kubelets: KubeSimulator, pool: MachinePool, gpus: None
) -> None:
    found = kubelets.cluster("prod")
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)
    node = node_object(
        GPU_0, provider_id="vco://nl-1/100", gpus=1, labels={"nvidia.com/gpu.product": "Tesla-T4"}
    )
    kubelets.put("prod", node)
    batch = kubernetes.client.BatchV1Api(
        kubernetes.config.new_client_from_config_dict(found.kubeconfig)
    )

    def jobs() -> list[str]:
        return [j.metadata.name for j in batch.list_namespaced_job("capvco-gpu-verify").items]

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    broker_flush()
    with celery_worker(first, *POOL, **WORKER) as worker:
        wait_for(jobs, 90, "verification Job", first / "celery.log")
        worker_kill(worker)  # the Job is made; its log is read at a later pass, not by this one
    (made,) = GpuVerification.objects.all()
    assert made.finished_at is None  # killed in between: no verdict yet

    with celery_worker(second, *POOL, **WORKER):
        log = second / "celery.log"
        wait_for(
            lambda: GpuVerification.objects.filter(finished_at__isnull=False).exists(),
            90,
            "verdict",
            log,
        )
        wait_for(lambda: jobs() == [], 30, "the Job's removal", log)

    (verdict,) = GpuVerification.objects.all()
    assert (verdict.pk, verdict.node_name, verdict.status) == (made.pk, GPU_0, Status.VERIFIED)
