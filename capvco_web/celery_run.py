"""The Celery app as `make run` starts its worker (bin/run: `celery -A capvco_web.celery_run`):
the project's app, and a worker that ends at once when its shutdown is done."""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any

from celery.signals import worker_shutdown

from capvco_web.celery import app

__all__ = ["app"]


@worker_shutdown.connect
def end_at_once(sender: Any, **kwargs: Any) -> None:
    """Its pool and beat have stopped and its messages are given back: what is left is
    Python's teardown, seconds of CPU on a busy machine, which Ctrl-C need not wait for."""
    if multiprocessing.active_children():  # never leave a child behind
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(sender.exitcode or 0)
