from __future__ import annotations

import os

import pytest
from django.db import connection

IN_CI = bool(os.environ.get("CI"))


def require(condition: bool, reason: str) -> None:
    """Skip (saying why) when a real part is missing; in CI a missing part is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


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
