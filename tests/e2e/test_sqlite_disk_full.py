"""SQLite's disk full under the embedded default: a write answers 503 naming the full disk
(the API as JSON, with Retry-After), never a 500; nothing half-made; reads keep answering;
once space is freed the same web processes take the write again.

Real parts only: a size-limited tmpfs (mounting needs root) holding the database file,
filled to the last byte by a file of the test, and gunicorn serving the project on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.e2e.test_database_down import Web, web_server
from tests.servers import disk_fill

pytestmark = pytest.mark.e2e

DISK_MB = 32


def tokens(web: Web) -> list[str]:
    answer = web.get("/api/v1/tokens/", headers={"Authorization": f"Bearer {web.token}"})
    assert answer.status_code == 200, answer.text
    return sorted(t["name"] for t in answer.json()["results"])


def token_create(web: Web, name: str) -> requests.Response:
    """A token is made from a browser session (with its CSRF token), not by a token."""
    return web.post("/api/v1/tokens/", json={"name": name})


def test_a_full_disk_under_sqlite_answers_503_then_takes_the_write_once_freed(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(DISK_MB)
    with web_server(tmp_path, f"sqlite:///{disk / 'capvco.sqlite3'}") as web:
        before = tokens(web)
        filler = disk_fill(disk)

        # Both web workers meet it.
        for n in range(4):
            answer = token_create(web, f"full-{n}")
            assert answer.status_code == 503, (answer.status_code, answer.text, web.said())
            assert answer.json() == {
                "detail": "The database is unavailable: its disk is full; try again shortly.",
                "code": "database_unavailable",
            }
            assert "Retry-After" in answer.headers
        assert tokens(web) == before  # nothing half-made, and reads still answer
        log = web.said()
        assert "Traceback" not in log and "ERROR" not in log, log
        assert "database unavailable (OperationalError: its disk is full)" in log

        filler.unlink()

        for n in range(4):
            assert token_create(web, f"freed-{n}").status_code == 201
        assert tokens(web) == sorted([*before, *(f"freed-{n}" for n in range(4))])


def test_a_page_read_while_the_disk_is_full_answers_without_sliding_the_idle_timeout(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    """A page read is no write, but a logged-in request moves its session's idle timeout
    forward (capvco_web.auth), a write the full disk refuses: the page still answers (not
    Django's 400 "the session was deleted", with a traceback), the write is said once at
    WARNING and stamped, and the next request once space is freed slides it."""
    disk = small_disk(DISK_MB)
    with web_server(tmp_path, f"sqlite:///{disk / 'capvco.sqlite3'}") as web:
        page = {"cookies": {"sessionid": web.session}}
        filler = disk_fill(disk)

        answer = web.get("/", **page)  # the session's first request: its slide is due

        assert answer.status_code == 200, (answer.status_code, answer.text[:500], web.said())
        log = web.said()
        assert "Traceback" not in log and "ERROR" not in log, log
        assert "session not saved: the database is unavailable (its disk is full)" in log

        filler.unlink()

        assert web.get("/", **page).status_code == 200
        assert "Traceback" not in web.said()
