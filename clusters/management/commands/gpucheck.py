"""Check the vGPU reservations: a summary, or the orphans and what they cost.

    manage.py gpucheck              reservations per location and state; exit 0
    manage.py gpucheck --orphans    orphaned reservations and VMs, their accrued cost and a
                                    total; exit 1 when there is any (cron, monitoring)
    manage.py gpucheck --orphans --json   the same as one JSON document

An orphaned VM costs its vCPUs and memory at the location's prices since it was flagged;
its disks and IOPS are not listed with it, so not counted, and the output says so.

The exit status follows `makemigrations --check`: finding orphans is the answer, not a
failure of the command, so it is `sys.exit(1)` after the output, not a CommandError.
Under `call_command` that surfaces as `SystemExit(1)`.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Count
from django.utils import timezone

from cloud.models import VirtualMachine
from clusters.orphans import vm_orphans_list
from gpus.models import VgpuReservation, cost_of, hours_between
from gpus.selectors import orphans_list

VM_COST_NOTE = "vCPUs and memory only: a VM's disks and IOPS are not listed with it"


def _since(row: VgpuReservation | VirtualMachine) -> str | None:
    return row.orphaned_since.isoformat() if row.orphaned_since else None


def _vm_accrued_cost(vm: VirtualMachine, now: datetime) -> Decimal:
    """What an orphan VM's vCPUs and memory cost since it was flagged."""
    assert vm.orphaned_since is not None  # an orphan
    return cost_of(hours_between(vm.orphaned_since, now), vm.compute_monthly_price())


class Command(BaseCommand):
    help = "Summarise vGPU reservations; with --orphans, list orphans and exit 1 if any."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--orphans",
            action="store_true",
            help="List orphaned reservations and VMs; exit 1 if any.",
        )
        parser.add_argument("--json", action="store_true", help="Print a JSON document.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["orphans"]:
            found = self._orphans(as_json=options["json"])
            if found:
                sys.exit(1)
        else:
            self._summary(as_json=options["json"])

    def _orphans(self, *, as_json: bool) -> int:
        now = timezone.now()  # one instant for every row, so that the total adds up
        vgpus = [(row, row.accrued_cost(now=now)) for row in orphans_list()]
        vms = [(vm, _vm_accrued_cost(vm, now)) for vm in vm_orphans_list()]
        # Locations may bill in different currencies: one total per currency.
        totals: dict[str, Decimal] = defaultdict(Decimal)
        for row, cost in vgpus:
            totals[row.location.currency] += cost
        for vm, cost in vms:
            totals[vm.location.currency] += cost
        total = {currency: str(amount) for currency, amount in sorted(totals.items())}
        if as_json:
            orphans: list[dict[str, Any]] = [
                {
                    "kind": "vgpu",
                    "name": row.name,
                    "location": row.location.name,
                    "owner": row.owner,
                    "orphaned_since": _since(row),
                    "accrued_cost": str(cost),
                    "currency": row.location.currency,
                }
                for row, cost in vgpus
            ]
            orphans += [
                {
                    "kind": "vm",
                    "name": vm.name,
                    "vm_id": vm.vm_id,
                    "location": vm.location.name,
                    "owner": vm.orphan_reason,
                    "orphaned_since": _since(vm),
                    "accrued_cost": str(cost),
                    "currency": vm.location.currency,
                    "cost_note": VM_COST_NOTE,
                }
                for vm, cost in vms
            ]
            self.stdout.write(json.dumps({"orphans": orphans, "total": total}, indent=2))
        elif not (vgpus or vms):
            self.stdout.write("No orphaned reservations or VMs.")
        else:
            self._orphans_table(vgpus, vms, total)
        return len(vgpus) + len(vms)

    def _orphans_table(
        self,
        vgpus: list[tuple[VgpuReservation, Decimal]],
        vms: list[tuple[VirtualMachine, Decimal]],
        total: dict[str, str],
    ) -> None:
        table = [["KIND", "NAME", "LOCATION", "ORPHANED SINCE", "ACCRUED COST", "OWNER"]]
        table += [
            [
                "vGPU",
                row.name,
                row.location.name,
                f"{row.orphaned_since:%Y-%m-%d %H:%M} UTC",
                f"{cost} {row.location.currency}",
                row.owner,
            ]
            for row, cost in vgpus
        ]
        table += [
            [
                "VM",
                f"{vm.name} ({vm.vm_id})",
                vm.location.name,
                f"{vm.orphaned_since:%Y-%m-%d %H:%M} UTC",
                f"{cost} {vm.location.currency}*",
                vm.orphan_reason,
            ]
            for vm, cost in vms
        ]
        widths = [max(len(cell) for cell in column) for column in zip(*table, strict=True)]
        for line in table:
            cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
        counted = f"{len(vgpus)} orphaned reservation(s), {len(vms)} orphaned VM(s)"
        for currency, amount in total.items():
            self.stdout.write(f"Total: {amount} {currency} ({counted})")
        if vms:
            self.stdout.write(f"* {VM_COST_NOTE}")

    def _summary(self, *, as_json: bool) -> None:
        counts = (
            VgpuReservation.objects.values("location__name", "state")
            .annotate(n=Count("pk"))
            .order_by("location__name", "state")
        )
        by_location: dict[str, dict[str, int]] = defaultdict(dict)
        for c in counts:
            by_location[c["location__name"]][c["state"]] = c["n"]
        orphaned = orphans_list().count()
        orphaned_vms = vm_orphans_list().count()
        if as_json:
            document = {
                "reservations": by_location,
                "orphaned": orphaned,
                "orphaned_vms": orphaned_vms,
            }
            self.stdout.write(json.dumps(document, indent=2))
            return
        if not by_location:
            self.stdout.write("No vGPU reservations.")
        for location, states in by_location.items():
            listed = ", ".join(f"{state} {n}" for state, n in states.items())
            self.stdout.write(f"{location}: {listed}")
        self.stdout.write(
            f"Orphaned: {orphaned} reservation(s), {orphaned_vms} VM(s) "
            "(details: gpucheck --orphans)"
        )
