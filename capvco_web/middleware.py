"""The database unreachable or out of resources (PostgreSQL stopped, restarting, refusing
connections, out of connection slots, memory or disk; SQLite's file unopenable or its disk
full) answers 503 Service Unavailable with `Retry-After`, never a 500: the API in its error
shape (`code: database_unavailable`), a page as a short HTML page. The reason is said in a
few words chosen here, never the driver's message (no host, user or password). Logged once
per request, at WARNING, with the exception's class.

Met in a view (the API's included: DRF hands on what its handler does not know), it
reaches DatabaseUnavailableMiddleware.process_exception. Met in a middleware before or
after the view (the session and the user are read there), Django makes it a 500 at once:
the 500 handler (capvco_web.api.server_error) answers the same 503 with
`database_unavailable`. With DEBUG on, Django shows its debug page there instead.

Any other database error (a broken constraint, a statement past its timeout) stays what
it is. docs/runbook.md: Where a failure shows (the database is down)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.template.loader import render_to_string

from capvco_web.auth import is_api_path
from capvco_web.write_refusals import write_refused

RETRY_AFTER_SECONDS = 5
CODE = "database_unavailable"

logger = logging.getLogger(__name__)

# PostgreSQL's SQLSTATEs of a server that is there but takes no work now: a connection
# exception (class 08), insufficient resources (class 53: its disk full, out of memory, no
# connection slot left; the work is taken again once the server has them), a shutdown
# (57P01 by an administrator, 57P02 after a crash), not accepting connections yet or any
# more (57P03).
UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53")
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
# What the answer says of a SQLSTATE, before any words of the message.
SQLSTATE_REASONS = {
    "53100": "its disk is full",
    "53200": "the server is out of memory",
    "53300": "no connection slot left",
}
SQLSTATE_CLASS_REASONS = {"53": "the server is out of resources"}

# What the answer says, by words in the driver's message (first match); never the message.
REASONS = (
    ("connection refused", "connection refused"),
    ("timeout expired", "connection timed out"),
    ("timed out", "connection timed out"),
    ("could not translate host name", "database host not found"),
    ("name or service not known", "database host not found"),
    ("authentication failed", "login refused"),
    ("too many clients", "no connection slot left"),
    ("remaining connection slots", "no connection slot left"),
    ("starting up", "the server is starting up"),
    ("shutting down", "the server is shutting down"),
    ("terminating connection", "the server is shutting down"),
    ("recovery mode", "the server is recovering"),
    ("unable to open database file", "cannot open the database"),
    ("database or disk is full", "its disk is full"),
)
REASON_OTHERWISE = "connection lost"
SQLITE_UNAVAILABLE = ("unable to open database file", "database or disk is full")


def is_database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached or takes no work now, not that
    one statement failed. Django's OperationalError and InterfaceError; of those, the
    driver's error (its cause) judges: PostgreSQL's by its SQLSTATE (none: the connection
    itself failed), SQLite's when the file cannot be opened or its disk is full (it takes
    no write until space is freed, and then takes it again)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    cause = exc.__cause__
    if cause is None:
        return True
    if hasattr(cause, "sqlstate"):  # psycopg
        sqlstate = cause.sqlstate
        return (
            sqlstate is None
            or sqlstate.startswith(UNAVAILABLE_SQLSTATE_CLASSES)
            or sqlstate in UNAVAILABLE_SQLSTATES
        )
    if type(cause).__module__ == "sqlite3":
        return any(words in str(cause) for words in SQLITE_UNAVAILABLE)
    return True


def unavailable_reason(exc: BaseException) -> str:
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or ""
    if reason := SQLSTATE_REASONS.get(sqlstate) or SQLSTATE_CLASS_REASONS.get(sqlstate[:2]):
        return reason
    said = str(exc.__cause__ or exc).lower()
    return next((reason for words, reason in REASONS if words in said), REASON_OTHERWISE)


def database_unavailable(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """The 503 for `request`, whose handling met `exc` (see is_database_unavailable)."""
    detail = f"The database is unavailable: {unavailable_reason(exc)}; try again shortly."
    write_refused(unavailable_reason(exc))  # readiness's `database` says so meanwhile
    if not getattr(request, "_database_unavailable_logged", False):
        request._database_unavailable_logged = True  # type: ignore[attr-defined]
        logger.warning(
            "database unavailable (%s: %s) on %s %s",
            type(exc).__name__,
            unavailable_reason(exc),
            request.method,
            request.path,
        )
    response: HttpResponse
    if is_api_path(request.path_info):
        response = JsonResponse({"detail": detail, "code": CODE}, status=503)
    else:
        # No request context: its processors read the user and the database.
        html = render_to_string("database_unavailable.html", {"detail": detail})
        response = HttpResponse(html, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    # Said once above, at WARNING: not again as Django's "ERROR django.request".
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


class DatabaseUnavailableMiddleware:
    """A view (or the API) that met the database unreachable answers 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_database_unavailable(exception):
            return database_unavailable(request, exception)
        return None
