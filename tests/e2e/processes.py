"""Starting the project's real processes from tests, and stopping them for sure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import requests
from django.conf import settings
from django.db import connection

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def group_stop(process: subprocess.Popen[Any], *, seconds: float) -> None:
    """SIGTERM to the process's group (started with start_new_session), SIGKILL when it
    has not ended within `seconds`."""
    with suppress(ProcessLookupError):  # a test may have killed the group already
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def environment_for_subprocess(**overrides: str) -> dict[str, str]:
    """The test settings, pointed at the test database this process uses."""
    db = connection.settings_dict
    database_url = (
        f"sqlite:///{db['NAME']}"  # the embedded default's file (tests.chaos_ops --embedded)
        if connection.vendor == "sqlite"
        else f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(ROOT),
    }
    env.update(overrides)
    return env


def broker_flush() -> None:
    """Drop this run's messages left in the broker by an earlier test (only this run's keys:
    another run on the same Redis database keeps its own)."""
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)


@contextmanager
def celery_worker(
    tmp_path: Path, *worker_args: str, beat: bool = True, **env_overrides: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker with embedded beat (unless `beat` is false: exactly one beat
    among several workers), in its own process group; `worker_args` go to `celery worker`,
    its log to tmp_path/celery.log."""
    log = (tmp_path / "celery.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "capvco_web",
            "worker",
            *(["-B"] if beat else []),
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            "-s",
            str(tmp_path / "celerybeat-schedule"),
            *worker_args,
        ],
        cwd=ROOT,
        env=environment_for_subprocess(**env_overrides),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        group_stop(process, seconds=20)
        log.close()


def worker_kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker and every process of its group, as the kernel or an operator's
    `kill -9` would: no task gets to finish, nothing is acknowledged."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@dataclass(frozen=True)
class WebServer:
    base: str
    pid: int
    """The gunicorn master's."""


@contextmanager
def gunicorn_serve(tmp_path: Path, env: dict[str, str], workers: int = 2) -> Iterator[WebServer]:
    """gunicorn serving the project as `make run` does (capvco_web/gunicorn_conf.py), in its
    own process group, its log to tmp_path/gunicorn.log; yields it once it answers
    /healthz."""
    port = free_port()
    log_path = tmp_path / "gunicorn.log"
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "capvco_web.wsgi", "-c",
             "python:capvco_web.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
             "--workers", str(workers), "--threads", "2", "--no-control-socket"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"gunicorn ended:\n{log_path.read_text(errors='replace')}")
                with suppress(requests.RequestException):  # not up yet, or still starting
                    if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("gunicorn did not answer /healthz within 60 s")
                time.sleep(0.2)
            yield WebServer(base, process.pid)
        finally:
            group_stop(process, seconds=30)


def gunicorn_workers(master: int) -> list[int]:
    """The worker processes of a gunicorn master (its children)."""
    children = Path(f"/proc/{master}/task/{master}/children")
    return [int(pid) for pid in children.read_text().split()] if children.exists() else []
