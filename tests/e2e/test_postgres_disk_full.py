"""PostgreSQL's disk full (SQLSTATE 53100) under a running web server: a write through the
API or the dashboard answers 503 naming the full disk, with Retry-After, never a 500 or a
traceback; nothing half-made; reads keep answering; once space is freed the same web
processes take the write again.

Real parts only: a private PostgreSQL whose data folder lives on a size-limited tmpfs
(mounting needs root), filled to the last byte by a file of the test, and gunicorn serving
the project against it. With the disk full, PostgreSQL still writes into the pages its
tables have: people keep making tokens until one needs a new page, which it cannot have."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import require
from tests.e2e.test_database_down import web_server
from tests.e2e.test_sqlite_disk_full import token_create, tokens
from tests.servers import PG_BIN, disk_fill, private_postgres

pytestmark = pytest.mark.e2e

DISK_MB = 160  # initdb's 40 MiB and the project's schema, with room to spare
FULL = "The database is unavailable: its disk is full; try again shortly."


def test_a_full_disk_under_postgresql_answers_503_then_takes_the_write_once_freed(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    require((PG_BIN / "initdb").exists(), f"needs PostgreSQL 15's programs in {PG_BIN}")
    data = small_disk(DISK_MB) / "data"
    data.mkdir()
    with (
        private_postgres(tmp_path / "postgres.log", data=data) as postgres,
        web_server(tmp_path, postgres.url) as web,
    ):
        before = tokens(web)
        filler = disk_fill(data.parent)

        made = []
        for n in range(500):  # a page of tokens (or of their audit) fills within a few dozen
            answer = token_create(web, f"filling-{n}")
            if answer.status_code != 201:
                break
            made.append(f"filling-{n}")
        assert answer.status_code == 503, (answer.status_code, answer.text, web.said())

        # Every write that needs a new page is refused, by both web workers.
        for n in range(4):
            answer = token_create(web, f"full-{n}")
            assert answer.status_code == 503, (answer.status_code, answer.text, web.said())
            assert answer.json() == {"detail": FULL, "code": "database_unavailable"}
            assert 1 <= int(answer.headers["Retry-After"]) <= 30
        # A dashboard form: the page says so, without a traceback.
        page = web.post("/views/save/", data={"list": "reservations", "name": "full", "query": ""})
        assert page.status_code == 503, (page.status_code, page.text[:2000], web.said())
        assert page.headers["Content-Type"].startswith("text/html")
        assert "Retry-After" in page.headers
        assert FULL in page.text and "Traceback" not in page.text

        assert tokens(web) == sorted([*before, *made])  # nothing half-made; reads answer
        log = web.said()
        assert "Traceback" not in log and "ERROR" not in log, log
        assert "database unavailable (OperationalError: its disk is full)" in log
        assert "could not extend file" in postgres.log.read_text()  # the server's own error

        filler.unlink()

        for n in range(4):
            assert token_create(web, f"freed-{n}").status_code == 201
        assert (
            web.post("/views/save/", data={"list": "reservations", "name": "freed"}).status_code
            == 302
        )
        assert tokens(web) == sorted([*before, *made, *(f"freed-{n}" for n in range(4))])
