"""History does not grow without bound: released reservations and audit events past their
retention are deleted (beat once a day, or the command), the prune is audited, and what
is billed or recent stays."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from capvco_web.models import AuditEvent
from capvco_web.retention import history_prune
from capvco_web.tasks import history_prune as history_prune_task
from gpus.models import VgpuReservation
from gpus.services import reservations_history_prune
from tests.factories import AuditEventFactory, VgpuReservationFactory

pytestmark = pytest.mark.django_db
State = VgpuReservation.State


def _aged(event: AuditEvent, days: int) -> AuditEvent:
    AuditEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - timedelta(days=days))
    return event


@pytest.fixture
def history() -> dict[str, object]:
    now = timezone.now()
    return {
        "old_released": VgpuReservationFactory(
            machine=None, state=State.RELEASED, released_at=now - timedelta(days=91)
        ),
        "recent_released": VgpuReservationFactory(
            machine=None, state=State.RELEASED, released_at=now - timedelta(days=89)
        ),
        # Billed, however old: never history.
        "old_orphan": VgpuReservationFactory(
            orphaned=True, orphaned_since=now - timedelta(days=400)
        ),
        "old_event": _aged(AuditEventFactory(), 366),
        "recent_event": _aged(AuditEventFactory(), 364),
    }


def test_prune_deletes_only_history_past_its_retention(history: dict[str, object]) -> None:
    pruned = history_prune()
    assert (pruned.deleted("released_reservations"), pruned.deleted("audit_events")) == (1, 1)
    assert set(VgpuReservation.objects.all()) == {history["recent_released"], history["old_orphan"]}
    kept = set(AuditEvent.objects.exclude(action="history.prune"))
    assert kept == {history["recent_event"]}


def test_the_prune_is_audited_with_what_went(history: dict[str, object]) -> None:
    history_prune()
    event = AuditEvent.objects.get(action="history.prune")
    assert event.actor_name == "history-prune"
    assert event.after is not None
    assert (event.after["released_reservations"], event.after["audit_events"]) == (1, 1)


def test_a_second_prune_deletes_and_records_nothing(history: dict[str, object]) -> None:
    history_prune()
    count = AuditEvent.objects.count()
    again = history_prune()
    assert (again.deleted("released_reservations"), again.deleted("audit_events")) == (0, 0)
    assert AuditEvent.objects.count() == count


@override_settings(RESERVATION_HISTORY_DAYS=0, AUDIT_HISTORY_DAYS=0)
def test_a_retention_of_0_keeps_everything(history: dict[str, object]) -> None:
    pruned = history_prune()
    assert (pruned.deleted("released_reservations"), pruned.deleted("audit_events")) == (0, 0)
    assert VgpuReservation.objects.count() == 3 and AuditEvent.objects.count() == 2


@override_settings(RESERVATION_HISTORY_DAYS=1)
def test_the_retention_comes_from_settings(history: dict[str, object]) -> None:
    assert history_prune().deleted("released_reservations") == 2


def test_prune_works_in_batches(history: dict[str, object]) -> None:
    now = timezone.now()
    VgpuReservationFactory.create_batch(
        7, machine=None, state=State.RELEASED, released_at=now - timedelta(days=100)
    )
    assert reservations_history_prune(before=now - timedelta(days=90), batch=3) == 8


def test_the_command_reports_and_its_dry_run_deletes_nothing(history: dict[str, object]) -> None:
    out = StringIO()
    call_command("history_prune", "--dry-run", stdout=out)
    assert "released reservations: would delete 1" in out.getvalue()
    assert "audit events: would delete 1" in out.getvalue()
    assert VgpuReservation.objects.count() == 3
    out = StringIO()
    call_command("history_prune", stdout=out)
    assert "released reservations: deleted 1" in out.getvalue()
    assert VgpuReservation.objects.count() == 2


def test_beat_runs_the_prune_once_a_day(history: dict[str, object]) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["history-prune"]
    assert entry["task"] == history_prune_task.name
    assert entry["schedule"] == timedelta(days=1)
    history_prune_task()
    assert VgpuReservation.objects.count() == 2
