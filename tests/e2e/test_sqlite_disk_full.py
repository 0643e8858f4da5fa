"""SQLite's disk full under the embedded default: a write answers 503 naming the full disk
(the API as JSON, with Retry-After), never a 500; nothing half-made; reads keep answering;
once space is freed the same web processes take the write again.

Real parts only: a size-limited tmpfs (mounting needs root) holding the database file,
filled to the last byte by a file of the test, and gunicorn serving the project on it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import require
from tests.e2e.test_database_down import Web, web_server

pytestmark = pytest.mark.e2e

DISK_MB = 32


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_MB MiB, mounted for this test alone."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    require(mounted.returncode == 0, f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError:
            pass
    with filler.open("ab", buffering=0) as out:  # the last bytes a chunk did not fit
        try:
            while True:
                out.write(b"\0")
        except OSError:
            pass
    return filler


def tokens(web: Web) -> list[str]:
    answer = web.get("/api/v1/tokens/", headers={"Authorization": f"Bearer {web.token}"})
    assert answer.status_code == 200, answer.text
    return sorted(t["name"] for t in answer.json()["results"])


def test_a_full_disk_under_sqlite_answers_503_then_takes_the_write_once_freed(
    tmp_path: Path, small_disk: Path
) -> None:
    with web_server(tmp_path, f"sqlite:///{small_disk / 'capvco.sqlite3'}") as web:
        # A token is made from a browser session (with its CSRF token), not by a token.
        csrf = "a" * 32
        browser = {"sessionid": web.session, "csrftoken": csrf}

        def token_create(name: str) -> requests.Response:
            return requests.post(
                f"{web.base}/api/v1/tokens/",
                json={"name": name},
                cookies=browser,
                headers={"X-CSRFToken": csrf},
                timeout=10,
            )

        before = tokens(web)
        filler = fill(small_disk)

        # Both web workers meet it.
        for n in range(4):
            answer = token_create(f"full-{n}")
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
            assert token_create(f"freed-{n}").status_code == 201
        assert tokens(web) == sorted([*before, *(f"freed-{n}" for n in range(4))])
