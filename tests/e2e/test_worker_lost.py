"""A task whose worker died mid-task runs again once the broker's visibility timeout, which
settings derive from the task time limit, is over: not after Redis's default hour."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

from capvco_web import celery_app
from capvco_web.environment import broker_transport_options
from tests.e2e.held_task import starts
from tests.e2e.processes import broker_flush, celery_worker

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
HELD = ("--include", "tests.e2e.held_task")
# A worker whose tasks may run 2 s: the broker gives a task up after a few seconds.
LIMITS = {"CELERY_TASK_SOFT_TIME_LIMIT": "1", "CELERY_TASK_TIME_LIMIT": "2"}


def wait_for(condition: Callable[[], bool], seconds: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    tails = "\n".join(f"{log}:\n{log.read_text()[-3000:]}" for log in logs if log.exists())
    pytest.fail(f"no {what} after {seconds} s\n{tails}")


def test_task_of_a_killed_worker_runs_again_once_the_visibility_timeout_is_over(
    tmp_path: Path, require_postgres: None
) -> None:
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    options = broker_transport_options(settings.CELERY_BROKER_URL, task_time_limit=2)
    visibility = options["visibility_timeout"]
    assert visibility < 10  # the time limit's, not Redis's default hour
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    logs = [first / "celery.log", second / "celery.log"]
    broker_flush()

    with celery_worker(first, *HELD, **LIMITS) as worker:
        celery_app.send_task("tests.e2e.held_task.held_until_released", args=[str(tmp_path)])
        wait_for(lambda: len(starts(tmp_path)) == 1, 60, "start of the task", logs)
        os.killpg(worker.pid, signal.SIGKILL)  # mid-task: no ack, no goodbye
        worker.wait()

    with celery_worker(second, *HELD, **LIMITS):
        wait_for(lambda: len(starts(tmp_path)) == 2, visibility + 15, "second run", logs)
        (tmp_path / "release").touch()
        wait_for((tmp_path / "done").exists, 10, "end of the second run", logs)

    first_start, second_start = starts(tmp_path)
    # Run again by the visibility timeout, not sooner (the broker gave the task up), and
    # within it and one sweep for unacknowledged messages.
    assert visibility - 1 <= second_start - first_start
    assert second_start - first_start <= visibility + options["unacked_restore_interval"] + 5
