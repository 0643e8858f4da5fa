"""A database that cannot be reached answers 503 (capvco_web.middleware), wherever in the
request it is met: a view, an API view, a middleware before the view. Other database
errors stay what they are. The errors are real ones: a connection to a port nobody
listens on, a duplicate row, a statement past its timeout.
tests/e2e/test_database_down.py stops a real PostgreSQL under a running web server."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import User
from django.db import DatabaseError, IntegrityError, OperationalError, connection, transaction
from django.db.utils import load_backend
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from pytest_django.fixtures import Settings
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

pytestmark = [pytest.mark.urls(__name__), pytest.mark.django_db]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_refused() -> DatabaseError:
    """What Django raises when the database's server refuses connections: the test
    database's settings, pointed at a port nobody listens on (SQLite: a file that cannot
    be opened)."""
    params = dict(connection.settings_dict)
    if connection.vendor == "postgresql":
        params.update(HOST="127.0.0.1", PORT=str(closed_port()))
    else:
        params["NAME"] = "/nonexistent/capvco/db.sqlite3"
    down = load_backend(params["ENGINE"]).DatabaseWrapper(params, alias="down")
    try:
        down.ensure_connection()
    except DatabaseError as exc:
        return exc
    finally:
        down.close()
    raise AssertionError("the connection did not fail")


def duplicate_row() -> IntegrityError:
    User.objects.create(username="twice")
    try:
        with transaction.atomic():
            User.objects.create(username="twice")
    except IntegrityError as exc:
        return exc
    raise AssertionError("no IntegrityError")


def statement_timeout() -> DatabaseError:
    """PostgreSQL cancelling a statement past statement_timeout (an OperationalError
    too): the database is up, the query was too slow."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 10")
            cursor.execute("SELECT pg_sleep(1)")
    except DatabaseError as exc:
        return exc
    raise AssertionError("the statement was not cancelled")


def raised_by_postgres(sqlstate: str) -> DatabaseError:
    """The error a real PostgreSQL server raises with `sqlstate` (as its own would, e.g.
    53100 when it cannot extend a file on a full disk)."""
    assert sqlstate.isalnum()
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{sqlstate}'; END $$"
            )
    except DatabaseError as exc:
        return exc
    raise AssertionError(f"no error {sqlstate}")


def raising(make: Callable[[], Exception]) -> Callable[[HttpRequest], HttpResponse]:
    @login_not_required
    def view(request: HttpRequest) -> HttpResponse:
        raise make()

    return view


class ApiDown(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        raise database_refused()


class MiddlewareDown:
    """A middleware meeting the database before any view (as the session's and the
    login's do, reading the session and the user)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.endswith("/before-view/"):
            raise database_refused()
        return self.get_response(request)


urlpatterns = [
    path("api/v1/down/", ApiDown.as_view()),
    path("page/down/", raising(database_refused)),
    path("page/before-view/", raising(lambda: AssertionError("the view is never reached"))),
    path("api/v1/before-view/", raising(lambda: AssertionError("the view is never reached"))),
    path("page/duplicate/", raising(duplicate_row)),
    path("page/slow/", raising(statement_timeout)),
    path("page/disk-full/", raising(lambda: raised_by_postgres("53100"))),
]
handler500 = "capvco_web.api.server_error"


@pytest.fixture
def web_client() -> Client:
    # The test client re-raises an exception that reached Django's 500 handling; these
    # tests look at the answer instead.
    return Client(raise_request_exception=False)


@pytest.fixture
def middleware_down(settings: Settings) -> None:
    at = settings.MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware")
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE[: at + 1],
        f"{__name__}.MiddlewareDown",
        *settings.MIDDLEWARE[at + 1 :],
    ]


def assert_warned_once(caplog: pytest.LogCaptureFixture, path: str) -> None:
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    warnings = [s for s in said if s[0] == "capvco_web.middleware"]
    assert len(warnings) == 1, said
    _, level, message = warnings[0]
    assert level == logging.WARNING
    assert message.startswith("database unavailable (OperationalError: ")
    assert path in message
    assert not [s for s in said if s[1] >= logging.ERROR], said


def assert_api_503(response: Any) -> None:
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert 1 <= int(response["Retry-After"]) <= 30
    body = response.json()
    assert body["code"] == "database_unavailable"
    assert body["detail"].startswith("The database is unavailable: ")
    assert body["detail"].endswith("; try again shortly.")


def assert_page_503(response: Any) -> None:
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert 1 <= int(response["Retry-After"]) <= 30
    text = response.content.decode()
    assert "The database is unavailable: " in text
    assert "Traceback" not in text and "OperationalError" not in text


def test_an_api_view_meeting_a_database_that_refuses_connections_answers_503_json(
    web_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    response = web_client.get("/api/v1/down/")
    assert_api_503(response)
    assert response.json()["detail"] in (
        "The database is unavailable: connection refused; try again shortly.",
        "The database is unavailable: cannot open the database; try again shortly.",
    )
    assert_warned_once(caplog, "GET /api/v1/down/")


def test_a_page_meeting_a_database_that_refuses_connections_answers_503_html(
    web_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    assert_page_503(web_client.get("/page/down/"))
    assert_warned_once(caplog, "GET /page/down/")


@pytest.mark.usefixtures("middleware_down")
@pytest.mark.parametrize(
    ("path", "check"),
    [("/page/before-view/", assert_page_503), ("/api/v1/before-view/", assert_api_503)],
)
def test_a_middleware_meeting_the_database_before_the_view_answers_503_too(
    web_client: Client, caplog: pytest.LogCaptureFixture, path: str, check: Callable[[Any], None]
) -> None:
    check(web_client.get(path))
    assert_warned_once(caplog, f"GET {path}")


def test_an_integrity_error_stays_a_server_error(web_client: Client) -> None:
    response = web_client.get("/page/duplicate/")
    assert response.status_code == 500
    assert "Retry-After" not in response


def test_a_statement_past_its_timeout_is_no_database_down(
    web_client: Client, require_postgres: None
) -> None:
    assert isinstance(statement_timeout(), OperationalError)
    response = web_client.get("/page/slow/")
    assert response.status_code == 500


def test_what_counts_as_the_database_unavailable(require_postgres: None) -> None:
    from capvco_web.middleware import is_database_unavailable

    assert is_database_unavailable(database_refused())
    assert not is_database_unavailable(duplicate_row())
    assert not is_database_unavailable(statement_timeout())
    assert not is_database_unavailable(ValueError("connection refused"))


@pytest.mark.parametrize(
    ("sqlstate", "reason"),
    [
        ("53100", "its disk is full"),
        ("53200", "the server is out of memory"),
        ("53300", "no connection slot left"),
        ("53400", "the server is out of resources"),  # configuration_limit_exceeded
    ],
)
def test_postgres_out_of_resources_is_the_database_unavailable_saying_which(
    require_postgres: None, sqlstate: str, reason: str
) -> None:
    from capvco_web.middleware import is_database_unavailable, unavailable_reason

    exc = raised_by_postgres(sqlstate)
    assert isinstance(exc, OperationalError)
    assert is_database_unavailable(exc)
    assert unavailable_reason(exc) == reason


def test_a_page_meeting_postgres_disk_full_answers_503_naming_it(
    web_client: Client, require_postgres: None, caplog: pytest.LogCaptureFixture
) -> None:
    response = web_client.get("/page/disk-full/")
    assert_page_503(response)
    assert "The database is unavailable: its disk is full; try again shortly." in (
        response.content.decode()
    )
    assert_warned_once(caplog, "GET /page/disk-full/")


@pytest.mark.django_db(transaction=True)
def test_a_disk_full_fails_readiness_as_the_database_until_a_heartbeat_is_written(
    web_client: Client, require_postgres: None
) -> None:
    """`SELECT 1` passes on a server whose disk is full: readiness says `database` from
    the write refused (its beat and workers, whose stamps are writes, are not judged
    meanwhile), until a heartbeat is written again."""
    from capvco_web.health import readiness
    from capvco_web.tasks import WORKERS, heartbeat, heartbeat_sent, tick_stamp

    heartbeat_sent(sender=heartbeat.name)
    heartbeat()
    assert all(check.ok for check in readiness(["database", "beat", "workers"]).values())

    web_client.get("/page/disk-full/")  # a write meets the full disk

    checks = readiness(["database", "beat", "workers"])
    assert not checks["database"].ok
    assert "writes refused" in checks["database"].detail
    assert checks["database"].detail.endswith("its disk is full")
    assert checks["beat"].ok and checks["beat"].detail.startswith("not judged")
    assert checks["workers"].ok and checks["workers"].detail.startswith("not judged")

    tick_stamp(WORKERS)  # space again: a worker's heartbeat written

    assert readiness(["database"])["database"].ok
