"""A worker killed with SIGKILL while a create or a reserve is on its way: the next worker
must neither send it again nor lose it. The simulator holds the call for a few seconds
before it acts, so the kill lands while the call is in flight and the next worker's first
listing does not show it yet."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from clusters.models import Machine, MachinePool
from gpus.models import VgpuReservation
from tests.e2e.processes import broker_flush, celery_worker, worker_kill
from tests.e2e.test_gpu_lifecycle_worker import FAST, e2e_site, wait_for
from tests.whitesky_sim import WhiteskySimulator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
IN_FLIGHT_SECONDS = 4


def in_flight(operation: str) -> bool:
    if operation == "createVirtualMachine":
        return Machine.objects.filter(
            phase=Machine.Phase.CREATING, vm_create_deadline__isnull=False
        ).exists()
    return VgpuReservation.objects.filter(state=VgpuReservation.State.RESERVING).exists()


@pytest.mark.parametrize("operation", ["createVirtualMachine", "reserveAndAttachVGPUToVM"])
def test_a_call_in_flight_when_its_worker_is_killed_happens_exactly_once(
    tmp_path: Path, whitesky_sim: WhiteskySimulator, require_postgres: None, operation: str
) -> None:
    site = e2e_site(whitesky_sim)
    cluster = site.cluster
    MachinePool.objects.create(
        cluster=cluster, site=site, name="gpu", gpu_type="NVIDIA A100", gpu_count=1
    )
    whitesky_sim.fault(operation=operation, latency_ms=IN_FLIGHT_SECONDS * 1000, times=1)
    broker_flush()

    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    with celery_worker(first_dir, **FAST) as first:
        wait_for(lambda: in_flight(operation), f"{operation} sent", first_dir / "celery.log")
        worker_kill(first)

    with celery_worker(second_dir, **FAST):
        wait_for(
            lambda: Machine.objects.filter(phase=Machine.Phase.RUNNING).exists(),
            "the machine running",
            second_dir / "celery.log",
            seconds=90,
        )
    state = whitesky_sim.state()
    vms = Counter(vm["name"] for vm in state["vms"] if vm["status"] != "DESTROYED")
    vgpus = Counter(v["vgpu_name"] for v in state["vgpus"] if v["status"] != "DESTROYED")
    assert vms == {"capvco-e2e-gpu-0": 1}
    assert vgpus == {"capvco-e2e-gpu-0-gpu-0": 1}
    machine = Machine.objects.get()
    [vgpu] = [v for v in state["vgpus"] if v["status"] != "DESTROYED"]
    assert vgpu["vm_id"] == machine.vm_id
