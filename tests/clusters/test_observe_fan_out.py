"""Beat's observe tick: every location its own task, observed once per tick; a new
location as soon as its account's listing (on the catalog's beat) finds it; a location
whose observation still waits in the broker's queue is not queued again, and one whose
message was lost is sent again once its mark lapses (capvco_web.queued)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from capvco_web.celery import app
from capvco_web.tasks import QUEUED_INTERVALS
from cloud.models import Account, Location
from clusters.tasks import observe_all, observe_catalog_all, observe_location
from tests.e2e.processes import broker_flush
from tests.whitesky_sim import WhiteskySimulator

pytestmark = pytest.mark.django_db


def profile_listings(sim: WhiteskySimulator) -> list[str]:
    return [
        call["path"].split("/locations/")[1].split("/")[0]
        for call in sim.calls()["calls"]
        if call["operation"] == "listAvailableGPUProfiles"
    ]


def test_each_tick_observes_every_location_once_and_a_new_one_when_listed(
    whitesky_sim: WhiteskySimulator, run_tasks: Callable[[], AbstractContextManager[None]]
) -> None:
    account = Account.objects.create(
        name="a", api_url=whitesky_sim.api_url, iam_url=whitesky_sim.iam_url,
        customer_id=whitesky_sim.customer_id, credential=whitesky_sim.token(),
    )  # fmt: skip

    with run_tasks():
        observe_catalog_all()  # the account's listing finds its locations
    first = profile_listings(whitesky_sim)
    whitesky_sim.clear_calls()
    with run_tasks():
        observe_all()
    second = profile_listings(whitesky_sim)
    operations = {call["operation"] for call in whitesky_sim.calls()["calls"]}

    names = sorted(Location.objects.filter(account=account).values_list("name", flat=True))
    assert len(names) == 2
    assert sorted(first) == sorted(second) == names
    assert "listCustomerLocations" not in operations  # the tick lists no account
    assert all(loc.observation_complete for loc in Location.objects.filter(account=account))


# --- a tick sends only what is not queued yet ---------------------------------------------


def queued_observations() -> list[tuple[int, float]]:
    """The observations waiting in this run's broker queue: (location id, seconds until the
    message expires), oldest first, as a worker would take them."""
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    messages = [
        json.loads(raw) for raw in client.lrange(f"{prefix}{app.conf.task_default_queue}", 0, -1)
    ]
    now = timezone.now()
    return [
        (
            json.loads(base64.b64decode(m["body"]))[0][0],
            (datetime.fromisoformat(m["headers"]["expires"]) - now).total_seconds(),
        )
        for m in reversed(messages)  # pushed on the left, taken from the right
        if m["headers"]["task"] == observe_location.name
    ]


@pytest.fixture
def two_locations(
    whitesky_sim: WhiteskySimulator, run_tasks: Callable[[], AbstractContextManager[None]]
) -> list[int]:
    Account.objects.create(
        name="a", api_url=whitesky_sim.api_url, iam_url=whitesky_sim.iam_url,
        customer_id=whitesky_sim.customer_id, credential=whitesky_sim.token(),
    )  # fmt: skip
    with run_tasks():
        observe_catalog_all()
    broker_flush()
    return sorted(Location.objects.values_list("pk", flat=True))


def tick(capture: Any) -> None:
    with capture(execute=True):
        observe_all()


def test_a_location_still_queued_is_not_queued_again_and_waits_its_turn_past_the_interval(
    two_locations: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    first, second = two_locations
    tick(django_capture_on_commit_callbacks)
    tick(django_capture_on_commit_callbacks)  # the first tick's observations still wait

    waiting = queued_observations()
    assert sorted(pk for pk, _ in waiting) == [first, second]  # once each, not twice
    interval = settings.OBSERVE_INTERVAL.total_seconds()
    assert all(interval < left <= 2 * QUEUED_INTERVALS * interval for _, left in waiting)

    # A worker starts the first location's observation: a tick may send it again (what
    # changes from then on is the next observation's), the other is still queued.
    observe_location.apply((first,))
    tick(django_capture_on_commit_callbacks)

    assert sorted(pk for pk, _ in queued_observations()) == [first, first, second]
    assert Location.objects.get(pk=first).observation_complete


def test_a_lost_observation_is_sent_again_once_its_mark_lapses(
    two_locations: list[int], django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.OBSERVE_INTERVAL = timedelta(seconds=0.25)  # marked for 4 intervals: 1 s
    tick(django_capture_on_commit_callbacks)
    broker_flush()  # the queue lost its messages (and here the marks too)
    tick(django_capture_on_commit_callbacks)
    assert len(queued_observations()) == 2  # nothing marked them: sent again at once

    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(f"{prefix}{app.conf.task_default_queue}")  # lost, the marks kept
    tick(django_capture_on_commit_callbacks)
    assert queued_observations() == []  # marked: not sent while the mark lives
    time.sleep(1.1)
    tick(django_capture_on_commit_callbacks)
    assert sorted(pk for pk, _ in queued_observations()) == two_locations
