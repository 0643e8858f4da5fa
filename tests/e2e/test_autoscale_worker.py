"""The pool autoscaler in a real Celery worker with beat, against the whitesky simulator and
the fake Kubernetes API over HTTP: two pending A100 pods grow a pool from zero; the worker
is SIGKILLed while the machines it decided are being made; the next worker ends with
exactly the decided machines, each VM and vGPU made once, and decides nothing more."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from capvco_web.models import AuditEvent
from clusters.models import Machine, MachinePool, PoolTarget
from tests.e2e.processes import broker_flush, celery_worker, worker_kill
from tests.e2e.test_gpu_lifecycle_worker import FAST, e2e_site, wait_for
from tests.kube_sim import KubeSimulator, node_object, pod_object
from tests.whitesky_sim import WhiteskySimulator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
WORKER = {**FAST, "AUTOSCALE_INTERVAL_SECONDS": "1"}
BE = "be-mac-dc01-001"


def test_a_worker_killed_while_its_decision_is_made_ends_with_exactly_the_decided_machines(
    tmp_path: Path,
    whitesky_sim: WhiteskySimulator,
    kube_sim: KubeSimulator,
    require_postgres: None,
) -> None:
    site = e2e_site(whitesky_sim, BE, kubeconfig=kube_sim.cluster("e2e").kubeconfig_yaml)
    cluster = site.cluster
    pool = MachinePool.objects.create(
        cluster=cluster, site=site, name="a100", replicas=0, gpu_type="NVIDIA A100",
        gpu_count=1, autoscale_enabled=True, autoscale_min=0, autoscale_max=4,
    )  # fmt: skip
    kube_sim.put(
        "e2e",
        node_object("cpu-0"),
        *[
            pod_object(f"train-{n}", phase="Pending", gpu_type="nvidia-a100", gpus=1)
            for n in (0, 1)
        ],
    )
    # The first VM create is held in the simulator: the kill lands while it is in flight.
    whitesky_sim.fault(operation="createVirtualMachine", latency_ms=4000, times=1)
    broker_flush()
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()

    with celery_worker(first_dir, **WORKER) as first:
        wait_for(
            lambda: Machine.objects.filter(
                pool=pool, phase=Machine.Phase.CREATING, vm_create_deadline__isnull=False
            ).exists(),
            "a decided machine's VM create in flight",
            first_dir / "celery.log",
        )
        worker_kill(first)
    assert PoolTarget.objects.get(pool=pool).replicas == 2  # both pods, one decision

    with celery_worker(second_dir, **WORKER):
        log = second_dir / "celery.log"
        wait_for(
            lambda: Machine.objects.filter(pool=pool, phase=Machine.Phase.RUNNING).count() == 2,
            "both machines running",
            log,
            seconds=90,
        )
        time.sleep(3)  # passes enough to decide again, were anything to decide

    state = whitesky_sim.state()
    vms = Counter(vm["name"] for vm in state["vms"] if vm["status"] != "DESTROYED")
    vgpus = Counter(v["vgpu_name"] for v in state["vgpus"] if v["status"] != "DESTROYED")
    assert vms == {"capvco-e2e-a100-0": 1, "capvco-e2e-a100-1": 1}
    assert vgpus == {"capvco-e2e-a100-0-gpu-0": 1, "capvco-e2e-a100-1-gpu-0": 1}
    assert PoolTarget.objects.get(pool=pool).replicas == 2
    assert AuditEvent.objects.filter(action="pool.autoscale").count() == 1
    assert Machine.objects.filter(pool=pool).count() == 2
