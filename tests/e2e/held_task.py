"""A task for the end-to-end tests only (a worker loads it with `--include`): it records
each start, then holds its worker until the test releases it."""

from __future__ import annotations

import time
from pathlib import Path

from celery import shared_task

HOLD_AT_MOST_SECONDS = 60  # never hold a worker forever, whatever the test does


@shared_task(name="tests.e2e.held_task.held_until_released")
def held_until_released(folder: str) -> None:
    here = Path(folder)
    with (here / "starts").open("a") as starts:
        starts.write(f"{time.time()}\n")
    deadline = time.monotonic() + HOLD_AT_MOST_SECONDS
    while not (here / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    (here / "done").touch()


def starts(folder: Path) -> list[float]:
    """When the task started in `folder`, once per run (wall clock: across processes)."""
    path = folder / "starts"
    return [float(line) for line in path.read_text().split()] if path.exists() else []
