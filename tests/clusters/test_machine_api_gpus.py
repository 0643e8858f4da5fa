"""The machine API says what GPUs a machine has: its vGPUs (not those released) and the
driver its VM was made to install, as docs/guides/gpu.md promises; a list of many GPU
machines costs the queries of a list of one."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from clusters.models import Machine, MachinePool
from gpus.models import VgpuReservation
from tests.factories import MachineFactory, MachinePoolFactory, VgpuReservationFactory

pytestmark = pytest.mark.django_db

State = VgpuReservation.State


def gpu_machine(pool: MachinePool, *, vgpus: int = 2) -> Machine:
    machine: Machine = MachineFactory(
        pool=pool,
        phase=Machine.Phase.RUNNING,
        vm_id=7000 + Machine.objects.count(),
        gpu_driver_version="550.90.07",
    )
    for n in range(vgpus):
        VgpuReservationFactory(
            machine=machine, vm_id=machine.vm_id, owner_index=n,
            name=f"capvco-{pool.cluster.name}-{machine.name}-gpu-{n}",
        )  # fmt: skip
    return machine


def listed(api: APIClient) -> list[dict[str, Any]]:
    response = api.get("/api/v1/machines/")
    assert response.status_code == 200, response.json()
    return list(response.json()["results"])


def test_a_machine_shows_its_vgpus_and_its_driver_version(api: APIClient) -> None:
    pool = MachinePoolFactory(gpus=True)
    machine = gpu_machine(pool)
    gone = VgpuReservationFactory(
        machine=machine, state=State.RELEASED, vgpu_id="released-1", owner_index=2,
        name=f"capvco-{pool.cluster.name}-{machine.name}-gpu-2",
    )  # fmt: skip
    MachineFactory(pool=pool)  # pending: no VM, no vGPU yet

    rows = {row["name"]: row for row in listed(api)}
    shown = api.get(f"/api/v1/machines/{machine.pk}/").json()

    row = rows[machine.name]
    assert row == shown
    assert row["gpu_driver_version"] == "550.90.07"
    held = machine.reservations.exclude(pk=gone.pk).order_by("name")
    assert row["vgpus"] == [
        {
            "id": r.pk, "name": r.name, "vgpu_id": r.vgpu_id, "gpu_id": r.gpu_id,
            "state": "attached", "vm_id": machine.vm_id,
        }
        for r in held
    ]  # fmt: skip
    assert [r["name"] for r in row["vgpus"]] == [
        f"capvco-{pool.cluster.name}-{machine.name}-gpu-0",
        f"capvco-{pool.cluster.name}-{machine.name}-gpu-1",
    ]
    pending = next(r for name, r in rows.items() if name != machine.name)
    assert (pending["vgpus"], pending["gpu_driver_version"]) == ([], "")


def test_listing_many_gpu_machines_costs_the_queries_of_one(api: APIClient) -> None:
    pool = MachinePoolFactory(gpus=True)
    gpu_machine(pool)
    with CaptureQueriesContext(connection) as one:
        assert len(listed(api)) == 1
    for _ in range(5):
        gpu_machine(pool, vgpus=3)
    with CaptureQueriesContext(connection) as six:
        rows = listed(api)

    assert len(rows) == 6 and sum(len(row["vgpus"]) for row in rows) == 17
    assert len(six) == len(one)


def test_the_schema_states_a_machines_vgpus_and_driver_version(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    machine = components["Machine"]["properties"]

    assert machine["gpu_driver_version"]["type"] == "string"
    assert machine["vgpus"]["type"] == "array" and machine["vgpus"]["readOnly"]
    vgpu = components[machine["vgpus"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert set(vgpu["properties"]) == {"id", "name", "vgpu_id", "gpu_id", "state", "vm_id"}
    assert set(vgpu["required"]) == set(vgpu["properties"])
