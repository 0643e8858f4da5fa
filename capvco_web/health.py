"""Liveness (/healthz) and readiness (/readyz). Readiness names each check, with its
detail, to staff only: anyone else (a probe) learns ready or not, and nothing about the
hosts, versions or errors behind it.

`/readyz?check=database&check=broker` runs only the checks named: a web pod's readiness
probe asks for what serving requests needs, so that a stopped beat, which a web pod
cannot mend, does not take every web pod out of its Service.

Beat's tick is judged twice, so that each says its own part: `beat` by the stamp beat
writes once the tick is in the broker, `workers` by the stamp of the worker that ran it.
Workers busy waiting out an unreachable whitesky leave the tick waiting: `workers` fails,
`beat` does not, and the app that knows whitesky (cloud) registers a check of its own
that names the account and the host that do not answer (`readiness_check_register`).

A database that answers but refuses writes (its disk full) fails `database` by what the
writers found (capvco_web.write_refusals); `beat` and `workers`, whose stamps are
writes, are not judged meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

from capvco_web.models import Heartbeat
from capvco_web.tasks import BEAT, WORKERS
from capvco_web.write_refusals import writes_refused

BROKER_TIMEOUT_SECONDS = 2

logger = logging.getLogger(__name__)


def check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    if refused := writes_refused():  # answering, but out of resources (its disk full)
        raise RuntimeError(refused)
    return "ok"


def check_broker() -> str:
    with Connection(
        settings.CELERY_BROKER_URL,
        connect_timeout=BROKER_TIMEOUT_SECONDS,
        transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
    ) as conn:
        conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)
    return "ok"


def ticks() -> tuple[datetime | None, datetime | None]:
    """When beat last sent its tick, and when a worker last ran one."""
    stamps = dict(
        Heartbeat.objects.filter(name__in=[BEAT, WORKERS]).values_list("name", "ticked_at")
    )
    return stamps.get(BEAT), stamps.get(WORKERS)


def check_beat() -> str:
    if refused := writes_refused():
        return f"not judged: its tick cannot be stamped ({refused})"
    sent, _ = ticks()
    if sent is None:
        raise RuntimeError("no beat tick recorded yet")
    age, limit = _seconds(timezone.now() - sent), _seconds(2 * settings.HEARTBEAT_INTERVAL)
    if age > limit:
        raise RuntimeError(f"last beat tick sent {age:.0f}s ago (limit {limit:.0f}s)")
    return f"ok, {age:.0f}s ago"


def check_workers() -> str:
    """A worker ran beat's tick within the limit, or ran the last one beat sent (a beat
    that stopped is `beat`'s to say)."""
    if refused := writes_refused():
        return f"not judged: beat's tick cannot be stamped ({refused})"
    sent, run = ticks()
    if run is None:
        raise RuntimeError("no beat tick run by a worker yet")
    now, limit = timezone.now(), _seconds(2 * settings.HEARTBEAT_INTERVAL)
    age = _seconds(now - run)
    if age <= limit:
        return f"ok, ran beat's tick {age:.0f}s ago"
    if sent is None or _seconds(sent - run) <= limit:
        return f"ok, ran beat's last tick {age:.0f}s ago"
    raise RuntimeError(
        f"beat's tick not run for {age:.0f}s (limit {limit:.0f}s) though beat sent one "
        f"{_seconds(now - sent):.0f}s ago: every worker busy, or none running"
    )


def _seconds(delta: timedelta) -> float:
    return delta.total_seconds()


READINESS_CHECKS: dict[str, Callable[[], str]] = {
    "database": check_database,
    "broker": check_broker,
    "beat": check_beat,
    "workers": check_workers,
}


def readiness_check_register(name: str, check: Callable[[], str]) -> None:
    """An app's own check (from its AppConfig.ready()): answers its detail when fine,
    raises saying what is wrong otherwise."""
    READINESS_CHECKS[name] = check


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    detail: str


def readiness(names: Iterable[str] = READINESS_CHECKS) -> dict[str, CheckResult]:
    """The checks named (all by default), each with its outcome."""
    results: dict[str, CheckResult] = {}
    for name in names:
        try:
            results[name] = CheckResult(ok=True, detail=READINESS_CHECKS[name]())
        except Exception as exc:  # a failing dependency is reported, never raised
            results[name] = CheckResult(ok=False, detail=f"{type(exc).__name__}: {exc}")
    return results


@login_not_required
@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    names = list(dict.fromkeys(request.GET.getlist("check"))) or list(READINESS_CHECKS)
    unknown = [name for name in names if name not in READINESS_CHECKS]
    if unknown:
        return JsonResponse(
            {
                "detail": f"unknown readiness check {', '.join(map(repr, unknown))}: "
                f"choose from {', '.join(READINESS_CHECKS)}"
            },
            status=400,
        )
    results = readiness(names)
    ready = all(r.ok for r in results.values())
    readiness_log(results)
    body: dict[str, object] = {"status": "ok" if ready else "unavailable"}
    if request.user.is_staff:
        body["checks"] = {
            name: {"status": "ok" if r.ok else "fail", "detail": r.detail}
            for name, r in results.items()
        }
    response = JsonResponse(body, status=200 if ready else 503)
    # Not ready is an answer, not a server error: said once by readiness_log, never as
    # Django's "ERROR django.request" on each probe (e.g. while beat has not ticked yet).
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


# Per set of checks asked for, those that failed on this process's last probe, so that a
# change is logged once, not every probe.
last_failing: dict[frozenset[str], frozenset[str]] = {}


def readiness_log(results: dict[str, CheckResult]) -> None:
    """Say once what newly fails (with all that fails), and when all is ready again; a
    recovery under way (fewer checks failing, none new: beat ticking before a worker ran
    its tick, as at every start) is not said again."""
    asked = frozenset(results)
    failing = frozenset(name for name, r in results.items() if not r.ok)
    before = last_failing.get(asked, frozenset())
    last_failing[asked] = failing
    if failing == before:
        return
    if failing - before:
        logger.warning(
            "not ready: %s",
            "; ".join(f"{name}: {results[name].detail}" for name in sorted(failing)),
        )
    elif not failing:
        logger.info("ready (%s)", ", ".join(sorted(asked)))
