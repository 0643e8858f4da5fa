"""Beat's tick through real processes: beat stamps it once sent, a worker once run; with no
worker to take it, /readyz's `beat` stays fine and `workers` says no worker ran it."""

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from pytest_django.fixtures import Settings

from capvco_web.health import readiness
from capvco_web.models import Heartbeat
from capvco_web.tasks import BEAT, WORKERS
from tests.e2e.processes import broker_flush, celery_worker
from tests.factories import HeartbeatFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def stamps_moving(tmp_path: Path, names: list[str], seconds: float = 60) -> None:
    """Each stamp named appears, then moves forward (beat keeps ticking)."""
    deadline = time.monotonic() + seconds
    first: dict[str, object] = {}
    while time.monotonic() < deadline:
        stamps = dict(Heartbeat.objects.filter(name__in=names).values_list("name", "ticked_at"))
        first = first or (stamps if len(stamps) == len(names) else {})
        if first and all(stamps[name] > first[name] for name in names):  # type: ignore[operator]
            return
        time.sleep(0.5)
    pytest.fail(
        f"{names} not stamped and moving: {first}\n{(tmp_path / 'celery.log').read_text()[-3000:]}"
    )


def test_worker_with_beat_records_the_heartbeat_in_the_database(
    tmp_path: Path, require_postgres: None
) -> None:
    broker_flush()  # no stale messages from an earlier test of this run
    with celery_worker(tmp_path, HEARTBEAT_INTERVAL_SECONDS="1"):
        stamps_moving(tmp_path, [BEAT, WORKERS])


def test_beat_ticking_with_no_worker_to_run_its_tick_is_the_workers_fault_not_beats(
    tmp_path: Path, require_postgres: None, settings: Settings
) -> None:
    broker_flush()
    settings.HEARTBEAT_INTERVAL = timedelta(seconds=1)
    ran = timezone.now() - timedelta(seconds=20)
    HeartbeatFactory(name=WORKERS, ticked_at=ran)  # the last tick a worker ran
    # Beat sends to the default queue; this worker takes work from another one only.
    with celery_worker(tmp_path, "--queues", "elsewhere", HEARTBEAT_INTERVAL_SECONDS="1"):
        stamps_moving(tmp_path, [BEAT])
        checks = readiness(["beat", "workers"])
    assert Heartbeat.objects.get(name=WORKERS).ticked_at == ran
    assert checks["beat"].ok, checks
    assert not checks["workers"].ok
    assert "every worker busy, or none running" in checks["workers"].detail, checks
