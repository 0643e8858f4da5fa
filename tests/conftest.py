from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from rest_framework.test import APIClient

from capvco_web import celery_app
from capvco_web.counters import counters, stamp
from capvco_web.write_refusals import write_done
from cloud.reach import REACH, unreachable

pytest_plugins = ["tests.kinds", "tests.whitesky_sim", "tests.http_stub", "tests.kube_sim"]

IN_CI = bool(os.environ.get("CI"))


def require(condition: bool, reason: str) -> None:
    """Skip (saying why) when a real part is missing; in CI a missing part is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _throttle_counts_start_empty() -> None:
    cache.clear()


@pytest.fixture(autouse=True)
def _database_takes_writes() -> None:
    """A write refused by an earlier test's full disk is not this test's (the counters'
    store outlives a test: capvco_web.write_refusals)."""
    write_done()


@pytest.fixture(autouse=True)
def _whitesky_answers() -> None:
    """An account out of reach in an earlier test is not this test's (the counters' store
    outlives a test: cloud.reach): each account whose calls failed has answered since.
    Left, the readiness check would name it, and look it up, on this test's pages."""
    now = time.time()
    for account in unreachable(counters().stamps(REACH), now=now, grace=0):
        stamp(REACH, f"{account.account_id}:answered", f"{now:.3f}")


@pytest.fixture
def require_postgres() -> None:
    require(connection.vendor == "postgresql", "needs PostgreSQL (set DATABASE_URL; bin/test does)")


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user(username="operator", password="s3cret-pass")


@pytest.fixture
def logged_in_client(client, user):  # type: ignore[no-untyped-def]
    client.force_login(user)
    return client


@pytest.fixture
def api_user(django_user_model: type[User]) -> User:
    """Whom `api` calls as: superuser `ops` (validation and audit, not roles: tests/access
    has the roles). A module whose tests call as someone else overrides this fixture."""
    return django_user_model.objects.create_superuser("ops", password="x")


@pytest.fixture
def api(api_user: User) -> APIClient:
    """The REST API's test client, authenticated as `api_user`."""
    client = APIClient()
    client.force_authenticate(api_user)
    return client


@pytest.fixture
def run_tasks(
    django_capture_on_commit_callbacks: Any,
) -> Callable[[], AbstractContextManager[None]]:
    """`with run_tasks(): ...`: tasks sent inside run in this process when the block ends,
    as a worker would run them (the end-to-end tests use a real worker)."""

    @contextmanager
    def running() -> Iterator[None]:
        celery_app.conf.task_always_eager = True
        try:
            with django_capture_on_commit_callbacks(execute=True):
                yield
        finally:
            celery_app.conf.task_always_eager = False

    return running
