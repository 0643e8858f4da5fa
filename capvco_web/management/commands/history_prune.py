"""Delete released vGPU reservations and audit events past their retention."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from capvco_web.retention import history_prune


class Command(BaseCommand):
    help = (
        "Delete released vGPU reservations older than RESERVATION_HISTORY_DAYS and audit "
        "events older than AUDIT_HISTORY_DAYS (0 keeps them). Beat does this once a day."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="only count what would go")

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        pruned = history_prune(dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        for each in pruned.histories:
            what, n, before = each.history.name, each.deleted, each.before
            if before is None:
                self.stdout.write(f"{what}: kept for ever (retention 0)")
            else:
                self.stdout.write(f"{what}: {verb} {n}, older than {before:%Y-%m-%d %H:%M} UTC")
