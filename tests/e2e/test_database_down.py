"""PostgreSQL down (stopped, restarting, refusing connections) under a running web server:
the API, the dashboard and the admin answer 503 naming the database, with Retry-After,
/readyz answers 503 and /healthz 200; once PostgreSQL is back the same web processes
answer again, without a restart.

Real parts only: a private PostgreSQL (initdb in a temporary folder, on a free port) that
the test stops and starts, and gunicorn serving the project against it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.conftest import require
from tests.e2e.processes import ROOT, environment_for_subprocess, gunicorn_serve
from tests.servers import PG_BIN, PrivatePostgres, private_postgres

pytestmark = pytest.mark.e2e


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {seconds} s")
        time.sleep(0.2)


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[PrivatePostgres]:
    require((PG_BIN / "initdb").exists(), f"needs PostgreSQL 15's programs in {PG_BIN}")
    with private_postgres(tmp_path / "postgres.log") as server:
        yield server


@dataclass
class Web:
    base: str
    log: Path
    token: str
    session: str

    def get(self, path: str, **kwargs: object) -> requests.Response:
        return requests.get(f"{self.base}{path}", timeout=10, allow_redirects=False, **kwargs)  # type: ignore[arg-type]

    def post(self, path: str, **kwargs: object) -> requests.Response:
        """A POST of the operator's browser: its session, and its CSRF token."""
        csrf = "a" * 32
        return requests.post(
            f"{self.base}{path}",
            cookies={"sessionid": self.session, "csrftoken": csrf},
            headers={"X-CSRFToken": csrf},
            timeout=10,
            allow_redirects=False,
            **kwargs,  # type: ignore[arg-type]
        )

    def said(self) -> str:
        return self.log.read_text(errors="replace")


SETUP = """
from django.contrib.auth.models import User
from django.test import Client
from capvco_web.tokens import api_token_create
user = User.objects.create_superuser("operator", "operator@example.com", "s3cret-pass")
_, raw = api_token_create(user=user, name="e2e", actor=user)
client = Client()
client.force_login(user)
print(raw, client.cookies["sessionid"].value)
"""


@contextmanager
def web_server(tmp_path: Path, database_url: str) -> Iterator[Web]:
    """The schema migrated into `database_url`, an operator with an API token and a
    session, and gunicorn (two workers) serving the project against it."""
    env = environment_for_subprocess(DATABASE_URL=database_url)
    manage = [sys.executable, "manage.py"]
    subprocess.run(
        [*manage, "migrate", "--noinput"], cwd=ROOT, env=env, check=True, capture_output=True,
        timeout=300,
    )  # fmt: skip
    made = subprocess.run(
        [*manage, "shell", "-c", SETUP], cwd=ROOT, env=env, check=True, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    token, session = made.stdout.split()[-2:]
    with gunicorn_serve(tmp_path, env) as server:
        yield Web(server.base, tmp_path / "gunicorn.log", token, session)


def test_database_down_answers_503_and_the_same_processes_answer_again_once_it_is_back(
    tmp_path: Path, postgres: PrivatePostgres
) -> None:
    with web_server(tmp_path, postgres.url) as web:
        api = {"headers": {"Authorization": f"Bearer {web.token}"}}
        page = {"cookies": {"sessionid": web.session}}
        assert web.get("/api/v1/tokens/", **api).status_code == 200
        assert web.get("/", **page).status_code == 200
        assert web.get("/admin/", **page).status_code == 200

        postgres.stop("fast")

        # Each web worker meets the loss once on its kept connection, then a refused
        # connect: ask often enough that both workers' requests are answered.
        for _ in range(4):
            answer = web.get("/api/v1/tokens/", **api)
            assert answer.status_code == 503, (answer.text, web.said())
            assert answer.headers["Content-Type"] == "application/json"
            assert 1 <= int(answer.headers["Retry-After"]) <= 30
            body = answer.json()
            assert body["code"] == "database_unavailable"
            assert body["detail"].startswith("The database is unavailable: ")
            assert "try again shortly" in body["detail"]

        for path in ("/", "/admin/", "/reservations/"):
            answer = web.get(path, **page)
            assert answer.status_code == 503, (path, answer.text[:2000], web.said())
            assert answer.headers["Content-Type"].startswith("text/html")
            assert "Retry-After" in answer.headers
            assert "The database is unavailable" in answer.text
            assert "Traceback" not in answer.text and "OperationalError" not in answer.text

        # An htmx request of the dashboard gets the same page, not a swapped-in traceback.
        answer = web.get("/", headers={"HX-Request": "true"}, **page)
        assert answer.status_code == 503 and "The database is unavailable" in answer.text

        ready = web.get("/readyz", params={"check": "database"})
        assert ready.status_code == 503 and ready.json() == {"status": "unavailable"}
        # A staff user's session cannot be read either: still the probe's 503, not a 500.
        assert web.get("/readyz", **page).status_code == 503
        assert web.get("/healthz").status_code == 200

        log = web.said()
        assert "not ready: database: OperationalError" in log
        assert "WARNING capvco_web.middleware database unavailable (OperationalError" in log
        assert "ERROR" not in log and "Traceback" not in log, log
        assert "s3cret" not in log

        postgres.start()

        def answers() -> bool:
            return web.get("/api/v1/tokens/", **api).status_code == 200

        wait_for(answers, 10, "API answer once PostgreSQL is back")
        # Every worker, not only the first to reconnect.
        for _ in range(6):
            assert web.get("/api/v1/tokens/", **api).status_code == 200
            assert web.get("/", **page).status_code == 200
        assert web.get("/readyz", params={"check": "database"}).status_code == 200
