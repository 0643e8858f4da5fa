"""`manage.py gpucheck`: orphans with their cost, as text or JSON; exit 1 when any."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from cloud.models import VirtualMachine
from gpus.models import ListedVgpu, VgpuReservation
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import orphan_made


def gpucheck(*args: str) -> tuple[int, str]:
    """Run the command; answers (exit status, stdout)."""
    out = StringIO()
    try:
        call_command("gpucheck", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def orphaned_hours_ago(row: VgpuReservation, hours: int) -> None:
    """As if the reservation had been orphaned `hours` ago (time passing, not a shortcut
    past the orphan path: the row was flagged by a real observation)."""
    since = timezone.now() - timedelta(hours=hours)
    ListedVgpu.objects.filter(location=row.location, vgpu_id=row.vgpu_id).update(
        orphaned_since=since
    )
    VirtualMachine.objects.filter(orphaned_since__isnull=False).update(orphaned_since=since)


def tenth_of_a_month(vm: VirtualMachine) -> Decimal:
    """73 hours of a VM's vCPUs and memory at its location's monthly unit prices."""
    location = vm.location
    monthly = vm.vcpus * location.unit_price("vcu") + Decimal(vm.memory_mib) / 1024 * (
        location.unit_price("mu")
    )
    assert monthly > 0
    return (monthly / 10).quantize(Decimal("0.01"))


def test_orphans_are_listed_with_owner_and_cost_and_exit_1(plane: Plane) -> None:
    orphaned_hours_ago(orphan_made(plane), 73)  # a tenth of a month at 300 EUR
    vm = VirtualMachine.objects.get()

    status, out = gpucheck("--orphans")

    assert status == 1
    [header, vgpu, vm_line, total, vm_note] = out.splitlines()
    assert header.split()[:3] == ["KIND", "NAME", "LOCATION"]
    assert vgpu.split()[:3] == ["vGPU", "capvco-demo-a100-0-gpu-0", NL]
    assert re.split(r"\s{2,}", vgpu)[-2:] == ["30.00 EUR", "machine demo/a100-0 does not exist"]
    # The force-deleted machine's VM is an orphan too: its vCPUs and memory, said so.
    vm_cost = tenth_of_a_month(vm)
    assert vm_line.split()[:4] == ["VM", "capvco-demo-a100-0", f"({vm.vm_id})", NL]
    assert f" {vm_cost} EUR* " in vm_line
    assert vm_line.endswith("  machine demo/a100-0 does not exist")
    assert total == (
        f"Total: {Decimal('30.00') + vm_cost} EUR (1 orphaned reservation(s), 1 orphaned VM(s))"
    )
    assert vm_note == "* vCPUs and memory only: a VM's disks and IOPS are not listed with it"


def test_orphans_as_json_give_each_orphan_and_a_total_per_currency(plane: Plane) -> None:
    row = orphan_made(plane)
    orphaned_hours_ago(row, 73)
    row.refresh_from_db()

    status, out = gpucheck("--orphans", "--json")

    assert status == 1
    document = json.loads(out)
    [orphan, vm] = document["orphans"]
    assert orphan["kind"] == "vgpu"
    assert orphan["name"] == "capvco-demo-a100-0-gpu-0"
    assert orphan["location"] == NL
    assert orphan["owner"] == "machine demo/a100-0 does not exist"  # force-deleted
    assert orphan["orphaned_since"] == row.orphaned_since.isoformat()  # type: ignore[union-attr]
    assert orphan["currency"] == "EUR"
    assert orphan["accrued_cost"] == "30.00"
    vm_cost = tenth_of_a_month(VirtualMachine.objects.get())
    assert (vm["kind"], vm["name"], vm["accrued_cost"]) == (
        "vm",
        "capvco-demo-a100-0",
        str(vm_cost),
    )
    assert vm["owner"] == "machine demo/a100-0 does not exist"
    assert document["total"] == {"EUR": str(Decimal("30.00") + vm_cost)}


def test_exit_0_when_nothing_is_orphaned(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)

    assert gpucheck("--orphans") == (0, "No orphaned reservations or VMs.\n")
    status, out = gpucheck("--orphans", "--json")
    assert (status, json.loads(out)) == (0, {"orphans": [], "total": {}})


def test_summary_counts_reservations_per_location_and_state_and_exits_0(plane: Plane) -> None:
    orphan_made(plane)

    status, out = gpucheck()

    assert status == 0
    assert f"{NL}: attached 1" in out.splitlines()
    assert "Orphaned: 1 reservation(s), 1 VM(s) (details: gpucheck --orphans)" in out


@pytest.mark.parametrize("args", [(), ("--json",)])
def test_summary_exits_0_with_no_reservations(plane: Plane, args: tuple[str, ...]) -> None:
    assert gpucheck(*args)[0] == 0
