"""How long history is kept: released vGPU reservations and audit events older than their
retention (RESERVATION_HISTORY_DAYS, AUDIT_HISTORY_DAYS; 0 keeps them) are deleted, once
a day by beat and by `manage.py history_prune`. The prune itself is audited."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from gpus.selectors import released_before
from gpus.services import reservations_history_prune

ACTOR = SystemActor.HISTORY_PRUNE
BATCH = 5000


@dataclass(frozen=True)
class HistoryPruned:
    reservations: int
    audit_events: int
    reservations_before: datetime | None
    audit_events_before: datetime | None


def _cutoff(now: datetime, days: int) -> datetime | None:
    return now - timedelta(days=days) if days > 0 else None


def audit_events_prune(*, before: datetime, batch: int = BATCH) -> int:
    deleted = 0
    while ids := list(
        AuditEvent.objects.filter(created_at__lt=before).values_list("pk", flat=True)[:batch]
    ):
        deleted += AuditEvent.objects.filter(pk__in=ids).delete()[0]
    return deleted


def history_prune(*, now: datetime | None = None, dry_run: bool = False) -> HistoryPruned:
    """Delete the history past its retention; `dry_run` only counts it."""
    now = now or timezone.now()
    reservations_before = _cutoff(now, settings.RESERVATION_HISTORY_DAYS)
    audit_before = _cutoff(now, settings.AUDIT_HISTORY_DAYS)
    if dry_run:
        return HistoryPruned(
            released_before(reservations_before).count() if reservations_before else 0,
            AuditEvent.objects.filter(created_at__lt=audit_before).count() if audit_before else 0,
            reservations_before,
            audit_before,
        )
    pruned = HistoryPruned(
        reservations_history_prune(before=reservations_before, batch=BATCH)
        if reservations_before
        else 0,
        audit_events_prune(before=audit_before) if audit_before else 0,
        reservations_before,
        audit_before,
    )
    if pruned.reservations or pruned.audit_events:
        with transaction.atomic():
            # No object of its own: the record names what was deleted, and until when.
            AuditEvent.objects.create(
                actor_name=ACTOR,
                action="history.prune",
                object_type="capvco_web.History",
                object_id="",
                object_repr=f"{pruned.reservations} reservations, {pruned.audit_events} events",
                reason="past the retention (RESERVATION_HISTORY_DAYS, AUDIT_HISTORY_DAYS)",
                after={
                    "released_reservations": pruned.reservations,
                    "released_before": _iso(reservations_before),
                    "audit_events": pruned.audit_events,
                    "audit_events_before": _iso(audit_before),
                },
            )
    return pruned


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
