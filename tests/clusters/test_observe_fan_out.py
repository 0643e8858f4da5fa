"""Beat's observe tick: every location its own task, observed once per tick; a new
location as soon as its account's listing (on the catalog's beat) finds it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from cloud.models import Account, Location
from clusters.tasks import observe_all, observe_catalog_all
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
