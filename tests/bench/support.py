"""What the benchmarks share: a throw-away test database, counting SQL, a real Celery
worker, waiting, and the verdicts they print.

Import it after ``django.setup()`` (each benchmark sets Django up before its imports).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import (
    CaptureQueriesContext,
    setup_test_environment,
    teardown_test_environment,
)

from capvco_web.auth import SESSION_ACTIVITY_KEY
from tests.e2e.processes import ROOT, environment_for_subprocess, group_stop

SQL_WRITES = ("INSERT", "UPDATE", "DELETE")


def postgresql_missing() -> bool:
    """Whether the benchmark lacks PostgreSQL (it says so): the figures are PostgreSQL's."""
    if connection.vendor == "postgresql":
        return False
    print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
    return True


@contextmanager
def throwaway_database() -> Iterator[None]:
    """A test database ``test_<name>`` beside DATABASE_URL's, made and dropped again."""
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()


def page_queries(client: Client, path: str, **headers: str) -> int:
    """The queries of one request of `path` by the client's user, without the session's
    own: a logged-in request slides the session's idle timeout once a minute
    (capvco_web.auth), on whichever request the minute ends, so a count that held it
    would differ from run to run. The slide is stamped just before."""
    session = client.session
    session[SESSION_ACTIVITY_KEY] = int(time.time())
    session.save()
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path, **headers)  # type: ignore[arg-type]
        assert response.status_code == 200, (path, response.content[:500])
        if response.streaming:  # its rows are read as it is sent
            b"".join(response.streaming_content)  # type: ignore[attr-defined]
    return len(queries)


def is_sql_write(sql: str) -> bool:
    return sql.lstrip().upper().startswith(SQL_WRITES)


class QueryCounter:
    """Counts queries without keeping them (for long runs; CaptureQueriesContext keeps 9000).
    Install it with ``connection.execute_wrapper(counter)``."""

    def __init__(self) -> None:
        self.queries = 0
        self.writes = 0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        self.queries += 1
        self.writes += is_sql_write(sql)
        return execute(sql, params, many, context)


@contextmanager
def celery_worker(
    command: list[str],
    folder: Path,
    log: Path,
    *,
    slots: int,
    env: dict[str, str],
    beat: bool = True,
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker (prefork, `slots` processes), with embedded beat unless `beat`
    is false, on the test database this process uses. `command` starts Celery's command
    line (``[python, "-m", "celery"]`` or a module that wraps it), its log goes to `log`."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *command,
                "-A",
                "capvco_web",
                "worker",
                *(["-B"] if beat else []),
                "--pool",
                "prefork",
                "--concurrency",
                str(slots),
                "--loglevel",
                "INFO",
                "--without-mingle",
                "--without-gossip",
                "-s",
                str(folder / "celerybeat-schedule"),
            ],
            cwd=ROOT,
            env=environment_for_subprocess(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            group_stop(process, seconds=60)


def wait_for(condition: Callable[[], bool], what: str, seconds: float, every: float = 0.25) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(every)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"
