import time
from pathlib import Path

import pytest

from capvco_web.models import Heartbeat
from capvco_web.tasks import BEAT
from tests.e2e.processes import broker_flush, celery_worker

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_worker_with_beat_records_the_heartbeat_in_the_database(
    tmp_path: Path, require_postgres: None
) -> None:
    broker_flush()  # no stale messages from an earlier test of this run
    with celery_worker(tmp_path, HEARTBEAT_INTERVAL_SECONDS="1") as worker:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not Heartbeat.objects.filter(name=BEAT).exists():
            assert worker.poll() is None, (tmp_path / "celery.log").read_text()
            time.sleep(0.5)
        beats = Heartbeat.objects.filter(name=BEAT)
        assert beats.exists(), (tmp_path / "celery.log").read_text()[-3000:]
        first = beats.get().ticked_at
        # Beat keeps ticking: the tick moves forward.
        while time.monotonic() < deadline and beats.get().ticked_at == first:
            time.sleep(0.5)
        assert beats.get().ticked_at > first
