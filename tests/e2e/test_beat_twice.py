"""Celery beat run twice by mistake (two workers, each with its embedded beat): every
periodic task is sent twice, and still a pool's machines, VMs and vGPUs are made exactly
once, and a scale down releases each exactly once. The passes are level-triggered and
each object's pass holds its lock (capvco_web.locks)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from clusters.models import Machine, MachinePool
from tests.e2e.processes import broker_flush, celery_worker
from tests.e2e.test_gpu_lifecycle_worker import FAST, e2e_site, wait_for
from tests.whitesky_sim import WhiteskySimulator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def live(state: dict[str, list[dict[str, str]]], kind: str, key: str) -> Counter[str]:
    return Counter(o[key] for o in state[kind] if o["status"] != "DESTROYED")


def test_two_beats_make_each_machine_vm_and_vgpu_once_and_release_each_once(
    tmp_path: Path, whitesky_sim: WhiteskySimulator, require_postgres: None
) -> None:
    site = e2e_site(whitesky_sim)
    cluster = site.cluster
    pool = MachinePool.objects.create(
        cluster=cluster, site=site, name="gpu", replicas=3, gpu_type="NVIDIA A100", gpu_count=1
    )
    broker_flush()
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    with celery_worker(first, **FAST), celery_worker(second, **FAST):
        wait_for(
            lambda: Machine.objects.filter(pool=pool, phase=Machine.Phase.RUNNING).count() == 3,
            "three machines running",
            first / "celery.log",
            seconds=90,
        )
        made = whitesky_sim.state()
        MachinePool.objects.filter(pk=pool.pk).update(replicas=1)
        wait_for(
            lambda: (
                Machine.objects.filter(pool=pool).count() == 1
                and len(live(whitesky_sim.state(), "vgpus", "vgpu_name")) == 1
            ),
            "the pool scaled down to one machine",
            first / "celery.log",
            seconds=90,
        )
        left = whitesky_sim.state()

    assert live(made, "vms", "name") == {f"capvco-e2e-gpu-{n}": 1 for n in range(3)}
    assert live(made, "vgpus", "vgpu_name") == {f"capvco-e2e-gpu-{n}-gpu-0": 1 for n in range(3)}
    assert live(left, "vgpus", "vgpu_name") == {"capvco-e2e-gpu-0-gpu-0": 1}
    calls = Counter(c["operation"] for c in whitesky_sim.calls()["calls"])
    assert calls["createVirtualMachine"] == 3
    assert calls["deleteVGPU"] == 2  # each surplus machine's vGPU released once
