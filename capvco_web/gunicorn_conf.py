"""gunicorn settings of `make run` and the image (`-c python:capvco_web.gunicorn_conf`)."""

from __future__ import annotations

import os
import sys
from typing import Any


def post_worker_init(worker: Any) -> None:
    """What a web worker loaded to start (modules, Django's apps and settings, the URL
    conf) is kept for its life: moved out of the cyclic collector's reach, as the Celery
    worker does (capvco_web.celery), so that a collection during a request scans only what
    requests made; a page of a long window makes many objects, and without this a
    collection of the whole heap landed in its time."""
    from capvco_web.celery import startup_objects_freeze

    startup_objects_freeze()


def worker_exit(server: Any, worker: Any) -> None:
    """A web worker that has answered its last request and closed its sockets ends at once,
    with the exit status it was ending with.

    Python's own teardown of a Django process is seconds of CPU on a busy machine: past the
    graceful timeout, the master would kill the worker ("SIGKILL! Perhaps out of memory?").
    """
    ending = sys.exc_info()[1]  # gunicorn calls this while the worker's SystemExit unwinds
    code = ending.code if isinstance(ending, SystemExit) else 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)
