"""Check the vGPU reservations: a summary, or the orphans and what they cost.

    manage.py gpucheck              reservations per location and state; exit 0
    manage.py gpucheck --orphans    the orphans, their accrued cost and a total;
                                    exit 1 when there is any (for cron and monitoring)
    manage.py gpucheck --orphans --json   the same as one JSON document

The exit status follows `makemigrations --check`: finding orphans is the answer, not a
failure of the command, so it is `sys.exit(1)` after the output, not a CommandError.
Under `call_command` that surfaces as `SystemExit(1)`.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Count
from django.utils import timezone

from gpus.models import VgpuReservation
from gpus.orphans import orphans_list


def _owner(row: VgpuReservation) -> str:
    if row.owner_cluster and row.owner_machine:
        return f"{row.owner_cluster}/{row.owner_machine}"
    return "unknown"


class Command(BaseCommand):
    help = "Summarise vGPU reservations; with --orphans, list orphans and exit 1 if any."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--orphans", action="store_true", help="List orphaned reservations; exit 1 if any."
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
        rows = [(row, row.accrued_cost(now=now)) for row in orphans_list()]
        # Locations may bill in different currencies: one total per currency.
        totals: dict[str, Decimal] = defaultdict(Decimal)
        for row, cost in rows:
            totals[row.location.currency] += cost
        total = {currency: str(amount) for currency, amount in sorted(totals.items())}
        if as_json:
            orphans = [
                {
                    "name": row.name,
                    "location": row.location.name,
                    "owner": _owner(row),
                    "orphaned_since": row.orphaned_since.isoformat()
                    if row.orphaned_since
                    else None,
                    "accrued_cost": str(cost),
                    "currency": row.location.currency,
                }
                for row, cost in rows
            ]
            self.stdout.write(json.dumps({"orphans": orphans, "total": total}, indent=2))
        elif not rows:
            self.stdout.write("No orphaned reservations.")
        else:
            self._orphans_table(rows, total)
        return len(rows)

    def _orphans_table(
        self, rows: list[tuple[VgpuReservation, Decimal]], total: dict[str, str]
    ) -> None:
        table = [["NAME", "LOCATION", "OWNER", "ORPHANED SINCE", "ACCRUED COST"]]
        table += [
            [
                row.name,
                row.location.name,
                _owner(row),
                f"{row.orphaned_since:%Y-%m-%d %H:%M} UTC",
                f"{cost} {row.location.currency}",
            ]
            for row, cost in rows
        ]
        widths = [max(len(cell) for cell in column) for column in zip(*table, strict=True)]
        for line in table:
            cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
        for currency, amount in total.items():
            self.stdout.write(f"Total: {amount} {currency} ({len(rows)} orphaned)")

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
        if as_json:
            document = {"reservations": by_location, "orphaned": orphaned}
            self.stdout.write(json.dumps(document, indent=2))
            return
        if not by_location:
            self.stdout.write("No vGPU reservations.")
        for location, states in by_location.items():
            listed = ", ".join(f"{state} {n}" for state, n in states.items())
            self.stdout.write(f"{location}: {listed}")
        self.stdout.write(f"Orphaned: {orphaned} (details: gpucheck --orphans)")
