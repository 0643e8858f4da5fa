"""The money on /metrics (billing.metrics): the rates now per location and cluster, the
month to date per account and cluster, open leaks and what leaks cost this month, as an
operator's Prometheus reads them, checked by promtool, against the hand-computed world of
tests/billing/test_costs.py (nl-ams: 5.43 EUR an hour with its orphans, of which the
cluster's machines 4.40; ch-zrh: 2.16 CHF)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import Leak
from billing.rollups import month_of, rollups_take
from gpus.models import VgpuReservation
from tests.billing.test_costs import World, gpus_make, machine_make, world_make
from tests.factories import AccountFactory, LocationFactory
from tests.gpus.test_metrics import scraped, series_checked, value

pytestmark = pytest.mark.django_db

D = Decimal


@pytest.fixture(autouse=True)
def allowed(settings: Any) -> None:
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]  # the test client's address


@pytest.fixture
def world() -> World:
    return world_make()


def _open_leak(world: World, hours: int) -> Leak:
    """A vGPU at 1 EUR an hour, leaked `hours` ago or since the month began if later."""
    since = max(timezone.now() - timedelta(hours=hours), month_of(timezone.now()))
    return Leak.objects.create(
        account=world.account, location=world.ams, currency="EUR", monthly_price=D("730"),
        kind=Leak.Kind.VGPU, external_id="v-open", name="capvco-prod-gone-gpu-0",
        billed_since=since, leaked_since=since,
    )  # fmt: skip


def test_rates_month_to_date_and_leaks_as_an_operator_reads_them(world: World) -> None:
    rollups_take(now=timezone.now())  # one hour sampled this month
    leak = _open_leak(world, hours=2)
    quiet = LocationFactory(account=AccountFactory(name="quiet"), currency="USD")

    samples = scraped(Client())

    acme = str(world.account.pk)
    rates = {
        (location, currency): value(
            samples, "capvco_cost_per_hour", account=acme, location=location, currency=currency
        )
        for location, currency in (("nl-ams", "EUR"), ("ch-zrh", "CHF"))
    }
    assert rates == {("nl-ams", "EUR"): 5.43, ("ch-zrh", "CHF"): 2.16}
    cluster = {"account": acme, "cluster": "prod"}
    assert value(samples, "capvco_cluster_cost_per_hour", **cluster, currency="EUR") == 4.40
    assert value(samples, "capvco_cluster_cost_per_hour", **cluster, currency="CHF") == 2.16
    # One sampled hour of its machines, and what its leak cost so far (the ledger's).
    spent = value(samples, "capvco_cost_month_to_date", account=acme, currency="EUR")
    assert spent == pytest.approx(4.40 + float(leak.cost()), abs=0.01)
    assert value(samples, "capvco_cost_month_to_date", account=acme, currency="CHF") == 2.16
    assert value(samples, "capvco_cluster_cost_month_to_date", **cluster, currency="EUR") == 4.4
    assert value(samples, "capvco_leaks_open", account=acme, currency="EUR") == 1
    leaked = value(samples, "capvco_leak_cost_month_to_date", account=acme, currency="EUR")
    assert leaked == pytest.approx(float(leak.cost()), abs=0.01)
    # An account where nothing costs yet: 0, not missing.
    here = {"account": str(quiet.account_id), "currency": "USD"}
    assert value(samples, "capvco_cost_per_hour", **here, location=quiet.name) == 0
    assert value(samples, "capvco_cost_month_to_date", **here) == 0
    assert value(samples, "capvco_leaks_open", **here) == 0


def test_promtool_finds_the_answer_valid_and_no_series_twice(world: World) -> None:
    rollups_take(now=timezone.now())
    _open_leak(world, hours=3)
    world_make(AccountFactory(name="globex"))  # the same location and cluster names

    series = series_checked(Client())
    clusters = {
        dict(labels)["account"] for name, labels in series if name == "capvco_cluster_cost_per_hour"
    }
    assert len(clusters) == 2


def test_a_scrape_reads_the_same_queries_however_much_history_and_how_many_machines(
    world: World,
) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scraped(Client())
        return len(captured.captured_queries)

    rollups_take(now=timezone.now())
    few = queries()
    for index in range(20):
        machine = machine_make(world.gpu, f"x{index}", 5000 + index, vcpus=2, mib=2048)
        gpus_make(machine, VgpuReservation.State.ATTACHED)
    for hours in range(1, 30):
        rollups_take(now=timezone.now() - timedelta(hours=hours))
    _open_leak(world, hours=4)
    many = queries()

    assert many == few, (few, many)
