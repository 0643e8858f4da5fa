"""Requests at the same time, over real PostgreSQL connections (one per thread): what the
API answers one at a time holds when they race."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, models
from django.db.models.signals import pre_save
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import ApiToken
from capvco_web.tokens import MAX_TOKENS_PER_USER, api_token_create
from cloud.models import Account, Membership
from clusters.models import ClusterSite
from tests.factories import (
    AccountFactory,
    ClusterFactory,
    LocationFactory,
    UserFactory,
    role_group,
)
from tests.test_api_framework import account_body

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def all_checked_before_any_saves(model: type[models.Model], parties: int) -> Iterator[None]:
    """Each save of `model` waits (up to a second) until `parties` requests reach it: all
    of them have passed every check before any row is written. A create that locks out
    the others waits in vain, and goes on."""
    barrier = threading.Barrier(parties)

    def wait(**kwargs: Any) -> None:
        with suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=1)

    pre_save.connect(wait, sender=model, weak=False)
    try:
        yield
    finally:
        pre_save.disconnect(wait, sender=model)


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads of their own, each with its own database connection."""
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def as_superuser() -> APIClient:
    client = APIClient(raise_request_exception=False)  # a 500 is an answer here
    client.force_authenticate(User.objects.get(username="root"))
    return client


@pytest.fixture
def root() -> User:
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def _account(root: User) -> tuple[type[models.Model], str, dict[str, Any], str]:
    return Account, "/api/v1/accounts/", account_body(name="twins"), "name"


def _membership(root: User) -> tuple[type[models.Model], str, dict[str, Any], str]:
    role_group("viewer")
    UserFactory(username="alice")
    body = {"user": "alice", "account": AccountFactory().pk, "role": "viewer"}
    return Membership, "/api/v1/memberships/", body, "non_field_errors"


def _site(root: User) -> tuple[type[models.Model], str, dict[str, Any], str]:
    cluster = ClusterFactory()
    location = LocationFactory(account=cluster.account)
    body = {"cluster": cluster.pk, "location": location.pk, "cloudspace_id": "cs-1", "image_id": 7}
    return ClusterSite, "/api/v1/sites/", body, "non_field_errors"


@pytest.mark.parametrize("create", [_account, _membership, _site])
def test_two_identical_creates_at_once_answer_201_and_409_as_one_after_the_other(
    root: User, create: Callable[[User], tuple[type[models.Model], str, dict[str, Any], str]]
) -> None:
    model, url, body, field = create(root)
    with all_checked_before_any_saves(model, 2):
        responses = at_once([lambda: as_superuser().post(url, body, format="json")] * 2)

    assert sorted(r.status_code for r in responses) == [201, 409], [r.content for r in responses]
    assert model.objects.count() == 1
    conflict = next(r for r in responses if r.status_code == 409).json()
    assert conflict["code"] == "conflict"
    assert list(conflict["fields"]) == [field]
    # The same answer as the second create gets when they come one after the other.
    sequential = as_superuser().post(url, body, format="json")
    assert sequential.status_code == 409
    assert list(sequential.json()["fields"]) == list(conflict["fields"])


def test_the_token_cap_holds_when_tokens_are_made_at_once(root: User) -> None:
    user = UserFactory(username="many")
    for index in range(MAX_TOKENS_PER_USER - 4):
        api_token_create(user=user, name=f"t{index}", actor=SystemActor.RECONCILER)

    def make(index: int) -> Callable[[], Any]:
        def call() -> Any:
            client = APIClient(raise_request_exception=False)
            client.force_login(User.objects.get(username="many"))
            return client.post("/api/v1/tokens/", {"name": f"parallel {index}"}, format="json")

        return call

    with all_checked_before_any_saves(ApiToken, 10):
        responses = at_once([make(i) for i in range(10)])

    assert ApiToken.objects.filter(user=user).count() == MAX_TOKENS_PER_USER
    assert sorted(r.status_code for r in responses) == [201] * 4 + [409] * 6
