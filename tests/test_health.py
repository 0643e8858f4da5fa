import logging
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django.fixtures import Settings

from capvco_web import health
from capvco_web.models import Heartbeat
from capvco_web.tasks import BEAT, WORKERS, heartbeat, heartbeat_sent
from tests.factories import HeartbeatFactory

pytestmark = pytest.mark.django_db


def ticking() -> None:
    """Beat sent its tick, and a worker ran it."""
    heartbeat_sent(sender=heartbeat.name)
    heartbeat()


def test_healthz_answers_without_login(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_ready_with_database_broker_and_a_fresh_beat_tick(admin_client: Client) -> None:
    ticking()
    response = admin_client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert {name: check["status"] for name, check in body["checks"].items()} == {
        "database": "ok",
        "broker": "ok",
        "beat": "ok",
        "workers": "ok",
        "whitesky": "ok",
    }


def test_readyz_is_503_naming_the_broker_when_the_broker_is_unreachable(
    admin_client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    ticking()
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = admin_client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["broker"]["status"] == "fail"
    assert body["checks"]["database"]["status"] == "ok"
    # What an operator needs to look at: the broker's address and what connecting met.
    assert "127.0.0.1:1" in body["checks"]["broker"]["detail"]
    assert "refused" in body["checks"]["broker"]["detail"].lower()


def test_readyz_is_503_when_beat_never_ticked(admin_client: Client) -> None:
    body = admin_client.get("/readyz").json()
    assert body["checks"]["beat"] == {
        "status": "fail",
        "detail": "RuntimeError: no beat tick recorded yet",
    }


def test_readyz_is_503_when_the_last_beat_tick_is_older_than_twice_its_interval(
    admin_client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    stale = timezone.now() - 2 * settings.HEARTBEAT_INTERVAL - timedelta(seconds=1)
    HeartbeatFactory(name=BEAT, ticked_at=stale)
    HeartbeatFactory(name=WORKERS, ticked_at=stale)  # the last tick beat sent was run
    response = admin_client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["beat"]["status"] == "fail"
    assert "last beat tick sent" in checks["beat"]["detail"]
    # The workers ran all that beat sent: not theirs to fail.
    assert checks["workers"]["status"] == "ok"
    assert checks["workers"]["detail"].startswith("ok, ran beat's last tick 3")


def test_readyz_names_the_workers_not_beat_when_beat_ticks_and_no_worker_runs_it(
    admin_client: Client, settings: Settings
) -> None:
    HeartbeatFactory(name=BEAT)  # sent just now
    HeartbeatFactory(name=WORKERS, ticked_at=timezone.now() - timedelta(seconds=95))
    response = admin_client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["beat"]["status"] == "ok"
    assert checks["workers"]["status"] == "fail"
    assert checks["workers"]["detail"].startswith("RuntimeError: beat's tick not run for 9")
    assert checks["workers"]["detail"].endswith("s ago: every worker busy, or none running"), (
        checks["workers"]
    )


def test_readyz_tells_an_anonymous_probe_ready_and_nothing_more(client: Client) -> None:
    ticking()
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_tells_an_anonymous_probe_unavailable_without_naming_hosts_or_errors(
    client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    ticking()
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable"}


def test_readyz_details_are_for_staff_not_for_any_logged_in_user(
    logged_in_client: Client,
) -> None:
    ticking()
    assert logged_in_client.get("/readyz").json() == {"status": "ok"}


WEB_READINESS = "/readyz?check=database&check=broker"  # a web pod's probe (deploy/kubernetes)


def test_readyz_subset_is_ready_without_beat_so_web_pods_stay_in_service(
    client: Client,
) -> None:
    # Beat never ticked: the full readiness fails, the web pod's subset does not.
    assert client.get("/readyz").status_code == 503
    response = client.get(WEB_READINESS)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_subset_reports_only_the_checks_asked_for(admin_client: Client) -> None:
    body = admin_client.get(WEB_READINESS).json()
    assert set(body["checks"]) == {"database", "broker"}


def test_readyz_subset_still_fails_when_a_check_it_asks_for_fails(
    client: Client, settings: Settings
) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get(WEB_READINESS)
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable"}


def test_readyz_subset_of_beat_alone_fails_when_beat_never_ticked(client: Client) -> None:
    assert client.get("/readyz?check=beat").status_code == 503


def test_readyz_refuses_an_unknown_check_naming_it_and_the_known_ones(client: Client) -> None:
    response = client.get("/readyz?check=database&check=databse")
    assert response.status_code == 400
    assert response.json() == {
        "detail": "unknown readiness check 'databse': choose from database, broker, beat, "
        "workers, whitesky"
    }


def test_readyz_refuses_an_empty_check_name(client: Client) -> None:
    assert client.get("/readyz?check=").status_code == 400


def test_heartbeat_task_moves_the_tick_forward() -> None:
    HeartbeatFactory(ticked_at=timezone.now() - timedelta(hours=1))
    ticking()
    assert timezone.now() - Heartbeat.objects.get(name=BEAT).ticked_at < timedelta(seconds=5)


def test_readyz_not_ready_is_said_once_as_a_warning_never_as_a_django_request_error(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    health.last_failing.clear()
    for _ in range(3):  # probes while beat has not ticked yet, as at start-up
        assert client.get("/readyz").status_code == 503
    ticking()
    assert client.get("/readyz").status_code == 200

    assert not [r for r in caplog.records if r.name == "django.request"]
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == health.__name__]
    assert said == [
        (
            "WARNING",
            "not ready: beat: RuntimeError: no beat tick recorded yet; "
            "workers: RuntimeError: no beat tick run by a worker yet",
        ),
        ("INFO", "ready (beat, broker, database, whitesky, workers)"),
    ]


def test_a_recovery_under_way_is_not_said_again_but_a_new_failure_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    health.last_failing.clear()

    def probe(*failing: str) -> None:
        health.readiness_log(
            {name: health.CheckResult(name not in failing, "down") for name in ("a", "b", "c")}
        )

    probe("a", "b")  # as at start: beat and workers
    probe("b")  # beat ticks, no worker ran its tick yet: recovering
    probe("b", "c")  # something new breaks
    probe()

    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == health.__name__]
    assert said == [
        ("WARNING", "not ready: a: down; b: down"),
        ("WARNING", "not ready: b: down; c: down"),
        ("INFO", "ready (a, b, c)"),
    ]
