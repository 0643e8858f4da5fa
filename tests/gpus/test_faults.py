"""Lost answers, races and a converged second pass: exactly `count` vGPUs, none leaked."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.models import Machine
from gpus.models import VgpuReservation
from tests.gpus.conftest import NL, Plane

PROVISIONING_WRITES = ["createVirtualMachine", "reserveAndAttachVGPUToVM", "startVirtualMachine"]
TEARDOWN_WRITES = ["stopVirtualMachine", "deleteVirtualMachine", "deleteVGPU"]


def reservations_per_machine(plane: Plane) -> dict[str, int]:
    counts: dict[str, int] = {}
    for vgpu in plane.sim_vgpus("capvco-demo-"):
        machine = vgpu["vgpu_name"].removeprefix("capvco-demo-").rsplit("-gpu-", 1)[0]
        counts[machine] = counts.get(machine, 0) + 1
    return counts


@pytest.mark.parametrize("operation", PROVISIONING_WRITES)
@pytest.mark.parametrize("lost", ["504", "drop"])
def test_lost_answer_while_provisioning_ends_with_exactly_count_vgpus(
    plane: Plane, operation: str, lost: str
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=2, replicas=2)
    plane.sim.fault(operation=operation, lost_response=lost, times=1)

    plane.converge(cluster)

    assert reservations_per_machine(plane) == {"a100-0": 2, "a100-1": 2}
    assert len(plane.sim_vms("capvco-demo-")) == 2  # no second VM from a lost create
    assert set(Machine.objects.values_list("phase", flat=True)) == {"running"}
    assert VgpuReservation.objects.filter(state="attached").count() == 4


@pytest.mark.parametrize("operation", TEARDOWN_WRITES)
def test_lost_answer_while_tearing_down_still_releases_everything(
    plane: Plane, operation: str
) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=2, replicas=2)
    plane.converge(cluster)
    plane.sim.fault(operation=operation, lost_response="drop", times=1)

    pool.replicas = 0
    pool.save()
    plane.converge(cluster)

    assert plane.sim_vgpus() == []
    assert plane.sim_vms() == []
    assert not Machine.objects.exists()
    assert plane.unassigned_billed() == {}


def test_last_instance_race_one_machine_wins_the_other_waits_without_leak(
    plane: Plane,
) -> None:
    # Two clusters plan from the same observation, which shows one free L40S instance left.
    blue, green = plane.cluster("blue", sites=(NL,)), plane.cluster("green", sites=(NL,))
    filler = plane.cluster("filler", sites=(NL,))
    plane.pool(filler, "l40s", gpu_type="NVIDIA L40S", gpu_count=4)
    plane.pool(filler, "more", gpu_type="NVIDIA L40S", gpu_count=3)
    plane.converge(filler)
    plane.pool(blue, "l40s", gpu_type="NVIDIA L40S", gpu_count=1)
    plane.pool(green, "l40s", gpu_type="NVIDIA L40S", gpu_count=1)
    plane.observe()

    plane.reconcile(blue)
    # Green plans from the same observation, but blue's reservation was recorded before it
    # was made: green's machine waits for capacity before any VM is made for it.
    plane.reconcile(green)

    winner = Machine.objects.get(pool__cluster=blue)
    loser = Machine.objects.get(pool__cluster=green)
    assert winner.phase == Machine.Phase.RUNNING
    assert loser.phase == Machine.Phase.PENDING and loser.waiting_for_capacity
    assert "waiting for capacity: 0 free of NVIDIA L40S" in loser.failure_message
    assert loser.vm_id is None and plane.sim_vms("capvco-green-") == []
    assert plane.sim_vgpus("capvco-green-") == []
    assert not VgpuReservation.objects.filter(name__startswith="capvco-green-").exists()
    assert len(plane.sim_vgpus("capvco-blue-")) == 1


def test_second_pass_with_nothing_changed_writes_nothing_anywhere(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "nl", gpu_type="NVIDIA A100", gpu_count=2, replicas=2)
    plane.pool(cluster, "be", location="be-mac-dc01-001", gpu_type="NVIDIA T4", gpu_count=1)
    plane.converge(cluster)
    plane.observe()  # the mirror catches up with the last writes
    plane.sim.clear_calls()

    with CaptureQueriesContext(connection) as queries:
        plane.observe()
        result = plane.reconcile(cluster)

    assert result.plan == []
    assert plane.sim.calls()["writes"] == 0
    db_writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]
    # Only each location's stamp of the pass (when its listings began): no per-row write.
    stamps = [sql for sql in db_writes if sql.startswith('UPDATE "cloud_location"')]
    assert len(stamps) == plane.account.locations.count()
    assert [sql for sql in db_writes if sql not in stamps] == []
