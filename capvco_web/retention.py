"""How long history is kept: each app's history (released vGPU reservations, registered
by gpus from its AppConfig.ready() with `history_register`) and the audit log, older than
their retention (RESERVATION_HISTORY_DAYS, AUDIT_HISTORY_DAYS; 0 keeps them), are deleted
once a day by beat and by `manage.py history_prune`. The prune itself is audited."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent

ACTOR = SystemActor.HISTORY_PRUNE
BATCH = 5000


@dataclass(frozen=True)
class History:
    """Rows kept for a while after they stop mattering, and how to count and delete those
    older than a moment."""

    name: str  # what the command reports: "released reservations"
    short: str  # what the audit record's summary says: "reservations"
    key: str  # the audit record's key of the count ("released_reservations")
    before_key: str  # and of its cutoff ("released_before")
    days_setting: str  # the retention in days, 0 keeps them ("RESERVATION_HISTORY_DAYS")
    count: Callable[[datetime], int]
    prune: Callable[[datetime, int], int]  # (before, batch) -> rows deleted


_histories: list[History] = []


def history_register(history: History) -> None:
    if history.key not in {h.key for h in _histories}:
        _histories.append(history)


@dataclass(frozen=True)
class Pruned:
    history: History
    deleted: int
    before: datetime | None  # None: kept for ever (retention 0)


@dataclass(frozen=True)
class HistoryPruned:
    histories: list[Pruned]

    def deleted(self, key: str) -> int:
        return next(p.deleted for p in self.histories if p.history.key == key)


def audit_events_prune(*, before: datetime, batch: int = BATCH) -> int:
    deleted = 0
    while ids := list(
        AuditEvent.objects.filter(created_at__lt=before).values_list("pk", flat=True)[:batch]
    ):
        deleted += AuditEvent.objects.filter(pk__in=ids).delete()[0]
    return deleted


# The audit log, last: the record of this prune is its newest event.
AUDIT_EVENTS = History(
    name="audit events",
    short="events",
    key="audit_events",
    before_key="audit_events_before",
    days_setting="AUDIT_HISTORY_DAYS",
    count=lambda before: AuditEvent.objects.filter(created_at__lt=before).count(),
    prune=lambda before, batch: audit_events_prune(before=before, batch=batch),
)


def _cutoff(now: datetime, days: int) -> datetime | None:
    return now - timedelta(days=days) if days > 0 else None


def history_prune(*, now: datetime | None = None, dry_run: bool = False) -> HistoryPruned:
    """Delete the history past its retention; `dry_run` only counts it."""
    now = now or timezone.now()
    histories = [*_histories, AUDIT_EVENTS]
    cutoffs = [(h, _cutoff(now, getattr(settings, h.days_setting))) for h in histories]
    if dry_run:
        return HistoryPruned(
            [Pruned(h, h.count(before) if before else 0, before) for h, before in cutoffs]
        )
    pruned = HistoryPruned(
        [Pruned(h, h.prune(before, BATCH) if before else 0, before) for h, before in cutoffs]
    )
    if any(p.deleted for p in pruned.histories):
        with transaction.atomic():
            # No object of its own: the record names what was deleted, and until when.
            after: dict[str, object] = {}
            for p in pruned.histories:
                after |= {p.history.key: p.deleted, p.history.before_key: _iso(p.before)}
            AuditEvent.objects.create(
                actor_name=ACTOR.value,
                action="history.prune",
                object_type="capvco_web.History",
                object_id="",
                object_repr=", ".join(f"{p.deleted} {p.history.short}" for p in pruned.histories),
                reason="past the retention (" + ", ".join(h.days_setting for h in histories) + ")",
                after=after,
            )
    return pruned


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
