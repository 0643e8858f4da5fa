"""The window of the money charts (billing.windows): the presets in whole steps, what is
refused and how each page, CSV and the costs API say it, the charts, their tables and CSVs
over the window asked for, a location's page's own money, and a fixed number of queries
whatever the window's length.

The world is tests/billing/test_costs.py's: an hour of it costs, in nl-ams (EUR), cluster
prod 4.40 and orphans 1.03 (the ledger's, when world_leaks writes them); in ch-zrh (CHF),
prod 2.16."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from datetime import UTC, datetime
from html import unescape
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.http import QueryDict
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from billing.rollups import DAY, HOUR, day_of, hour_of, month_of, rollups_take
from billing.windows import CUSTOM, window_from
from cloud.models import Account
from tests.bench.support import page_queries
from tests.billing.support import world_leaks
from tests.billing.test_costs import World, world_make
from tests.dashboard.test_money import _history, chart_tables
from tests.factories import AccountFactory, MembershipFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 10, 10, tzinfo=UTC)


@pytest.fixture
def world() -> World:
    return world_make()


@pytest.fixture
def member(client: Client) -> Callable[[Account], Client]:
    def log_in(account: Account) -> Client:
        client.force_login(MembershipFactory(account=account, role="viewer").user)
        return client

    return log_in


@pytest.fixture(autouse=True)
def hours_kept(settings: Any) -> None:
    settings.COST_HOURLY_HISTORY_DAYS = 60


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "name", "step", "start", "end", "steps"),
    [
        ({}, "month", "day", "2026-12-01", "2027-01-01", 31),
        ({"window": "24h", "step": "hour"}, "24h", "hour",
         "2026-11-30 11:00", "2026-12-01 11:00", 24),
        ({"window": "24h"}, "24h", "day", "2026-12-01", "2026-12-02", 1),
        ({"window": "7d"}, "7d", "day", "2026-11-25", "2026-12-02", 7),
        ({"window": "7d", "step": "hour"}, "7d", "hour",
         "2026-11-24 11:00", "2026-12-01 11:00", 168),
        ({"window": "month"}, "month", "day", "2026-12-01", "2027-01-01", 31),
        ({"window": "last-month"}, "last-month", "day", "2026-11-01", "2026-12-01", 30),
        ({"start": "2026-11-03", "end": "2026-11-10T00:00:00Z"}, CUSTOM, "day",
         "2026-11-03", "2026-11-10", 7),
        # An offset is read as such: 01:00 in UTC+1 is midnight UTC.
        ({"start": "2026-11-30T22:00Z", "end": "2026-12-01T01:00+01:00", "step": "hour"},
         CUSTOM, "hour", "2026-11-30 22:00", "2026-12-01 00:00", 2),
    ],
)  # fmt: skip
def test_a_window_is_whole_steps_the_presets_ending_with_the_one_now_running(
    query: dict[str, str], name: str, step: str, start: str, end: str, steps: int
) -> None:
    window = window_from(query, now=NOW)

    assert (window.name, window.step) == (name, step)
    assert (window.start, window.end) == (_at(start), _at(end))
    assert len(window.steps) == steps
    # Its URL asks for it again.
    assert window_from(window.query, now=NOW) == window


@pytest.mark.parametrize(
    ("query", "name", "said"),
    [
        ("window=9d", "window", "Give one of 24h, 7d, 30d, month, last-month (not '9d')"),
        ("step=month", "step", "Give hour or day (not 'month')"),
        ("window=7d&window=30d", "window", "Give this parameter once"),
        ("window=7d&start=2026-11-01&end=2026-11-02", "window", "not both"),
        ("start=2026-11-01", "end", "Give the end too"),
        ("start=yesterday&end=2026-11-02", "start", "ISO 8601"),
        ("start=2026-02-30&end=2026-03-02", "start", "ISO 8601"),
        ("start=2026-11-01T10:30Z&end=2026-11-02&step=hour", "start", "the start of an hour"),
        ("start=2026-11-01T10:00Z&end=2026-11-02", "start", "the start of a day"),
        ("start=2026-11-02&end=2026-11-01", "end", "after the start"),
        ("start=2024-01-01&end=2026-11-01", "end", "at most 731 days"),
        # Hours are kept 60 days: 61 days back by the hour is refused, by the day it is not.
        ("start=2026-10-01&end=2026-10-02&step=hour", "start", "Hours are kept 60 days"),
        # A chart by the hour is at most a week of bars: 7 days, not 8; by the day, more.
        ("start=2026-11-23&end=2026-12-01&step=hour", "end", "at most 7 days (168 hours)"),
        ("window=30d&step=hour", "end", "at most 7 days (168 hours)"),
        ("start=2026-11-24&end=2026-12-01&step=hour", None, ""),
        ("window=last-month&step=day", None, ""),
        ("start=2026-10-01&end=2026-11-01&step=day", None, ""),
    ],
)
def test_a_window_is_refused_naming_what_is_wrong(query: str, name: str | None, said: str) -> None:
    if name is None:
        window_from(QueryDict(query), now=NOW)
        return
    with pytest.raises(ValidationError) as refused:
        window_from(QueryDict(query), now=NOW)
    assert said in " ".join(refused.value.message_dict[name]), refused.value.message_dict


def _sampled(world: World, hours: list[datetime]) -> None:
    """Each hour sampled, with the ledger's leaks of it (orphans 1.03 EUR)."""
    for hour in hours:
        rollups_take(now=hour)
        world_leaks(world, hour, hour + HOUR)


def _csv(client: Client, url: str) -> list[list[str]]:
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return list(csv.reader(io.StringIO(response.content.decode())))


def _csv_urls(html: str) -> dict[str, str]:
    """Each chart's CSV link on a page, by the chart's key."""
    return {
        key: url.replace("&amp;", "&")
        for key, url in re.findall(
            r'<figure class="chart" id="chart-([^"]+)".*?class="button secondary chart-csv" '
            r'href="([^"]+)"',
            html,
            re.S,
        )
    }


def test_the_charts_their_tables_and_csvs_follow_the_window(
    world: World, member: Callable[[Account], Client]
) -> None:
    hour = hour_of(timezone.now()) - HOUR  # the hour before this one
    ten_days_back = hour - 10 * DAY
    _sampled(world, [ten_days_back, hour])
    client = member(world.account)
    cluster = f"/clusters/{world.cluster.pk}/"
    location = f"/locations/{world.ams.pk}/"

    for page in ("/", location, cluster):
        by_hour = client.get(page, {"window": "24h", "step": "hour"}).content.decode()
        rows = chart_tables(by_hour)["cost-eur"]
        assert len(rows) == 1 + 24, page  # the header, then the hours
        shown = {row[0]: row[1:] for row in rows[1:]}
        assert shown[f"{hour:%Y-%m-%d %H:00}"][0] == ("4.36" if page == cluster else "4.40")
        # Each CSV asks for the page's window, and holds the numbers of its table.
        urls = _csv_urls(by_hour)
        assert urls and all("window=24h&step=hour" in url for url in urls.values()), urls
        for key, table in chart_tables(by_hour).items():
            assert _csv(client, urls[key]) == table, (page, key)

    week = chart_tables(client.get("/", {"window": "7d"}).content.decode())["cost-eur"]
    today = day_of(timezone.now())
    assert [row[0] for row in week[1:]] == [f"{today - n * DAY:%Y-%m-%d}" for n in range(6, -1, -1)]
    custom = {"start": f"{ten_days_back:%Y-%m-%d}", "end": f"{ten_days_back + DAY:%Y-%m-%d}"}
    one_day = chart_tables(client.get("/", custom).content.decode())
    assert one_day["cost-eur"] == [
        ["day", "prod", "orphans", "total"],  # long past: no forecast
        [f"{ten_days_back:%Y-%m-%d}", "4.40", "1.03", "5.43"],
    ]
    assert one_day["waste-eur"][1] == [f"{ten_days_back:%Y-%m-%d}", "1.03", "1.00"]


def _links(html: str, attribute: str) -> dict[str, str]:
    """The picker's links (data-window or data-step), by their value: their href, or "" for
    one not offered."""
    start = html.index('id="window-picker"')
    picker = html[start : html.index("</nav>", start)]
    found = re.findall(
        rf'<(a|span) class="button[^"]*" (?:href="([^"]*)" )?{attribute}="([^"]+)"', picker
    )
    return {value: unescape(href) for _, href, value in found}


def test_the_picker_offers_each_preset_by_the_hour_where_it_fits_and_else_by_the_day(
    world: World, member: Callable[[Account], Client]
) -> None:
    client = member(world.account)
    cluster = f"/clusters/{world.cluster.pk}/"

    by_hour = client.get(cluster, {"window": "24h", "step": "hour", "page": "1"}).content.decode()
    month = client.get(cluster, {"window": "month", "page": "1"}).content.decode()

    presets = _links(by_hour, "data-window")
    assert presets == {
        "24h": "?window=24h&step=hour&page=1#money",
        "7d": "?window=7d&step=hour&page=1#money",
        "30d": "?window=30d&step=day&page=1#money",
        "month": "?window=month&step=day&page=1#money",
        "last-month": "?window=last-month&step=day&page=1#money",
    }
    # A month is too long by the hour: the step is not offered (the page says why).
    assert _links(month, "data-step") == {"hour": "", "day": "?window=month&page=1&step=day#money"}
    assert _links(by_hour, "data-step")["day"] == "?window=24h&step=day&page=1#money"
    # The custom window's form sends the page's other parameters again beside it.
    assert '<input type="hidden" name="page" value="1">' in month


def test_a_page_says_a_refused_window_and_its_csv_and_the_api_refuse_it_alike(
    world: World, member: Callable[[Account], Client]
) -> None:
    _sampled(world, [hour_of(timezone.now()) - HOUR])
    client = member(world.account)
    api = APIClient()
    api.force_login(MembershipFactory(account=world.account, role="viewer").user)
    too_old = day_of(timezone.now()) - 70 * DAY
    by_the_hour = {"start": f"{too_old:%Y-%m-%d}", "end": f"{too_old + DAY:%Y-%m-%d}"}

    for page, csv_url in (
        ("/", "/money/cost-eur.csv"),
        (f"/locations/{world.ams.pk}/", f"/locations/{world.ams.pk}/money/cost-eur.csv"),
        (f"/clusters/{world.cluster.pk}/", f"/clusters/{world.cluster.pk}/money/cost-eur.csv"),
    ):
        for query, said in (
            ({"window": "9d"}, "window: Give one of 24h, 7d, 30d, month, last-month (not '9d')."),
            ({**by_the_hour, "step": "hour"}, "start: Hours are kept 60 days"),
            ({"start": "2026-12-01T10:30Z", "end": "2026-12-02"}, "start: Give the start of a day"),
        ):
            shown = client.get(page, query)
            assert shown.status_code == 400, (page, query)
            html = unescape(shown.content.decode())
            assert 'id="window-errors"' in html and said in html, (page, query)
            assert "data-chart=" not in html  # no chart of a window refused
            assert 'id="month-figures"' in html  # the month is no window's
            refused = client.get(csv_url, query)
            assert refused.status_code == 400, (csv_url, query)
            assert said in refused.content.decode()
        # The same day by the day is answered.
        assert client.get(page, {**by_the_hour, "step": "day"}).status_code == 200

    # The API refuses the hours alike: one rule.
    answer = api.get(
        "/api/v1/costs/",
        {"start": f"{too_old:%Y-%m-%dT%H:%M:%SZ}", "end": f"{too_old + DAY:%Y-%m-%dT%H:%M:%SZ}",
         "step": "hour"},
    )  # fmt: skip
    assert answer.status_code == 400
    assert "Hours are kept 60 days" in answer.json()["fields"]["start"][0]


def test_a_locations_page_charts_its_own_money(
    world: World, member: Callable[[Account], Client]
) -> None:
    theirs = world_make(AccountFactory(name="globex"))
    hour = hour_of(timezone.now()) - HOUR
    _sampled(world, [hour])
    rollups_take(now=hour + HOUR)  # theirs too, and ours again: each location its own
    client = member(world.account)
    query = {"window": "24h", "step": "hour"}

    ams = chart_tables(client.get(f"/locations/{world.ams.pk}/", query).content.decode())
    zrh = chart_tables(client.get(f"/locations/{world.zrh.pk}/", query).content.decode())

    assert "cost-chf" not in ams and "cost-eur" not in zrh
    # Not their cluster of the same name: ours alone.
    assert ams["cost-eur"][0][:3] == ["hour", "prod", "orphans"]
    assert not [column for column in ams["cost-eur"][0] if "globex" in column]
    row = next(r for r in ams["cost-eur"] if r[0] == f"{hour:%Y-%m-%d %H:00}")
    assert row[1:3] == ["4.40", "1.03"]  # prod, orphans
    row = next(r for r in zrh["cost-chf"] if r[0] == f"{hour:%Y-%m-%d %H:00}")
    assert row[1] == "2.16"
    assert client.get(f"/locations/{theirs.ams.pk}/").status_code == 404
    assert client.get(f"/locations/{theirs.ams.pk}/money/cost-eur.csv").status_code == 404


def test_the_money_pages_make_as_many_queries_whatever_the_window(
    world: World, member: Callable[[Account], Client]
) -> None:
    now = timezone.now()
    # Sampled at today's first hour too, which sums yesterday: at any time of day, every
    # window holds summed days (before 01:00 UTC the last hour's sample did not).
    _sampled(world, sorted({month_of(now), day_of(now), hour_of(now) - HOUR}))
    client = member(world.account)
    _history(now, range(1, 366))  # copies the month's first hour
    year = {"start": f"{day_of(now) - 365 * DAY:%Y-%m-%d}", "end": f"{day_of(now) + DAY:%Y-%m-%d}"}
    cluster, location = f"/clusters/{world.cluster.pk}/", f"/locations/{world.ams.pk}/"
    pages = ["/", location, cluster, "/money/cost-eur.csv", f"{cluster}money/cost-eur.csv",
             f"{location}money/cost-eur.csv"]  # fmt: skip

    def counts(query: dict[str, str]) -> dict[str, int]:
        asked = "&".join(f"{k}={v}" for k, v in query.items())
        return {page: page_queries(client, f"{page}?{asked}") for page in pages}

    by_day = [counts({"window": "24h"}), counts({"window": "30d"}), counts(year)]
    by_hour = [counts({"window": "24h", "step": "hour"}), counts({"window": "7d", "step": "hour"})]

    assert by_day[0] == by_day[1] == by_day[2], by_day
    assert by_hour[0] == by_hour[1], by_hour
