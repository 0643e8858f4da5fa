"""One backoff formula and one limiter, each used with its caller's own numbers."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from django.db import connections
from django.test import override_settings

from capvco_web.backoff import backoff_seconds
from capvco_web.integrations.whitesky import RetryPolicy
from capvco_web.locks import _key64
from capvco_web.worker_slots import _Worker, account_calls_slot, account_worker_slot, slot
from clusters.reconcile import retry_delay
from notify.services import retry_delay as notify_retry_delay
from tests.checkout import ROOT

APPS = ("capvco_web", "cloud", "gpus", "clusters", "sriov", "billing", "dashboard", "notify")


def test_the_backoff_doubles_from_its_base_up_to_its_cap() -> None:
    assert [backoff_seconds(n, base=5.0) for n in (0, 1, 2, 3)] == [5, 10, 20, 40]
    assert [backoff_seconds(n, base=1.0, cap=4.0) for n in (0, 2, 3, 10_000)] == [1, 4, 4, 4]


def test_with_jitter_the_wait_is_at_least_half_the_backoff() -> None:
    rng = random.Random(3)
    waits = [backoff_seconds(2, base=1.0, cap=8.0, rng=rng) for _ in range(50)]
    assert all(2.0 <= wait <= 4.0 for wait in waits) and len(set(waits)) > 1


def test_each_caller_keeps_its_own_numbers() -> None:
    # Machines: MACHINE_RETRY_BASE_SECONDS 30, MACHINE_RETRY_MAX_SECONDS 900.
    assert [retry_delay(n).total_seconds() for n in (1, 2, 6)] == [30, 60, 900]
    # Webhook posts: 30 s, doubled, at most an hour.
    assert [notify_retry_delay(n).total_seconds() for n in (1, 2, 20)] == [30, 60, 3600]
    # The whitesky client: the server's Retry-After wins, capped.
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, max_retry_after=30.0)
    assert policy.delay(5, retry_after=3600, rng=random.Random()) == 30.0


def test_no_app_module_doubles_a_wait_of_its_own() -> None:
    """A backoff written inline again (`base * 2 ** retries`) is a second formula."""
    doubling = re.compile(r"\b2(\.0)?\s*\*\*\s*[A-Za-z_(]")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts and path.name != "backoff.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if doubling.search(line)
    ]
    assert found == [], f"use capvco_web.backoff.backoff_seconds: {found}"


@pytest.fixture
def other_process(db: None) -> Iterator[ExitStack]:
    """Another session's advisory locks (another worker holding slots)."""
    if connections["default"].vendor != "postgresql":
        pytest.skip("slots across processes are PostgreSQL advisory locks here")
    with ExitStack() as stack:
        yield stack


def _hold(stack: ExitStack, name: str) -> None:
    other = connections.create_connection("default")
    stack.callback(other.close)
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [_key64(name)])


def test_a_slot_is_free_until_all_its_size_are_held_elsewhere(other_process: ExitStack) -> None:
    _hold(other_process, "pool:0")
    with slot("pool", 2) as taken:
        assert taken
    _hold(other_process, "pool:1")
    with slot("pool", 2) as taken:
        assert not taken
    with slot("other-pool", 2) as taken:
        assert taken


@override_settings(WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT=2)
def test_an_accounts_calls_in_flight_are_counted_over_every_worker(
    other_process: ExitStack,
) -> None:
    # Machine steps (clusters.reconcile) and bill checks (billing.tasks) take these slots.
    _hold(other_process, "account-calls:7:0")
    _hold(other_process, "account-calls:7:1")
    with account_calls_slot(7) as taken:
        assert not taken
    with account_calls_slot(8) as taken:
        assert taken


@override_settings(WORKER_SLOTS_PER_ACCOUNT=1)
def test_an_accounts_share_of_a_worker_is_counted_per_worker(
    other_process: ExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    with account_worker_slot(7) as taken:
        assert taken  # outside a worker: no share
    monkeypatch.setattr(_Worker, "slots", 4)
    monkeypatch.setattr(_Worker, "node", "w1")
    _hold(other_process, "worker-slot:w1:7:0")
    with account_worker_slot(7) as taken:
        assert not taken
    monkeypatch.setattr(_Worker, "node", "w2")
    with account_worker_slot(7) as taken:
        assert taken
