"""The money charts' window picked in a real browser (Chromium through Playwright) against a
live server: a preset and a step clicked, then a start and an end chosen in the form; the
URL keeps the window, a chart's table holds what the costs API answers for the same window
(the link the page gives) and what the chart's CSV holds, a refresh of a cluster page's
body and its other form keep it, and a refused window is said on the page (400) and by the
CSV (400).

The world is tests/billing/test_costs.py's: an hour of it costs, in nl-ams (EUR), cluster
prod 4.40 and orphans 1.03 (the ledger's leaks of that hour)."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.rollups import DAY, HOUR, day_of, hour_of, rollups_take
from tests.billing.support import world_leaks
from tests.billing.test_costs import World, world_make
from tests.e2e.test_dashboard_browser import PASSWORD, log_in
from tests.e2e.test_money_browser import _table

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")
D = Decimal


@pytest.fixture
def sampled(transactional_db: None, settings: Any) -> tuple[World, list[datetime]]:
    """The costs world sampled in three hours, each with its leaks: the hour before this
    one, the same hour two days before, and ten days before (outside the last 7 days)."""
    settings.DASHBOARD_POLL_SECONDS = 1
    settings.COST_HOURLY_HISTORY_DAYS = 60
    User.objects.create_superuser("admin", password=PASSWORD)
    world = world_make()
    last = hour_of(timezone.now()) - HOUR
    hours = [last - 10 * DAY, last - 2 * DAY, last]
    for hour in hours:
        rollups_take(now=hour)
        world_leaks(world, hour, hour + HOUR)
    return world, hours


def _label(start: str, step: str) -> str:
    moment = datetime.fromisoformat(start.replace("Z", "+00:00"))
    return f"{moment:%Y-%m-%d %H:00}" if step == "hour" else f"{moment:%Y-%m-%d}"


def _answered(page: Page, live_server: Any, group_by: str) -> tuple[str, list[dict[str, Any]]]:
    """The costs API's series for the page's window (the link the page gives), grouped."""
    link = page.locator("#window-shown a[data-api]").get_attribute("href")
    assert link and "group_by=cluster" in link, link
    answer = page.request.get(f"{live_server.url}{link.replace('cluster', group_by, 1)}")
    assert answer.ok, answer.text()
    series = answer.json()
    return series["step"], [row for row in series["results"] if row["currency"] == "EUR"]


def _agrees(page: Page, live_server: Any) -> list[dict[str, str]]:
    """The cost chart's table, held to the API's series of the same window (each cluster's
    total, the orphans and what every group cost, per step) and to the chart's CSV."""
    shown = _table(page, "cost-eur")
    step, clusters = _answered(page, live_server, "cluster")
    _, accounts = _answered(page, live_server, "account")
    assert shown and next(iter(shown[0])) == step
    per_cluster = {(_label(r["start"], step), r["cluster_name"]): D(r["total"]) for r in clusters}
    orphans: dict[str, Decimal] = {}
    totals: dict[str, Decimal] = {}
    for row in accounts:
        label = _label(row["start"], step)
        orphans[label] = orphans.get(label, D(0)) + D(row["orphan_vgpu"]) + D(row["orphan_vm"])
        totals[label] = totals.get(label, D(0)) + D(row["total"])
    for row in shown:
        label = row[step]
        assert row["prod"] == f"{per_cluster.get((label, 'prod'), D(0)):.2f}", row
        assert row.get("orphans", "0.00") == f"{orphans.get(label, D(0)):.2f}", row
        spent = D(row["total"]) - D(row.get("forecast", "0"))
        assert spent == totals.get(label, D(0)).quantize(D("0.01")), row
    link = page.locator("#chart-cost-eur a.chart-csv").get_attribute("href")
    assert link is not None
    download = page.request.get(f"{live_server.url}{link}")
    assert download.ok
    rows = list(csv.reader(io.StringIO(download.text())))
    assert rows == [list(shown[0]), *(list(row.values()) for row in shown)]
    return shown


def test_a_window_picked_on_the_page_is_the_apis_and_the_csvs(
    page: Page, live_server: Any, sampled: tuple[World, list[datetime]], picture: Any
) -> None:
    world, (ten_days_back, two_days_back, last) = sampled
    log_in(page, live_server)

    page.click("#window-picker a[data-window='7d']")
    expect(page).to_have_url(re.compile(r"/\?window=7d&step=day#money$"))
    page.click("#window-picker a[data-step='hour']")
    expect(page).to_have_url(re.compile(r"/\?window=7d&step=hour#money$"))
    expect(page.locator("#window-shown")).to_contain_text("the last 7 days, by the hour")
    picture("money-window", page.locator("#money"))
    rows = _agrees(page, live_server)
    assert len(rows) == 7 * 24
    by_hour = {row["hour"]: row for row in rows}
    assert (
        by_hour[f"{last:%Y-%m-%d %H:00}"]["prod"],
        by_hour[f"{last:%Y-%m-%d %H:00}"]["orphans"],
    ) == ("4.40", "1.03")
    assert by_hour[f"{two_days_back:%Y-%m-%d %H:00}"]["prod"] == "4.40"

    # A location's page, the same window: its own money, as the API has it for the location.
    page.goto(f"{live_server.url}/locations/{world.ams.pk}/?window=7d&step=hour")
    assert len(_agrees(page, live_server)) == 7 * 24

    # A start and an end of one's own, by the day.
    page.goto(f"{live_server.url}/")
    page.fill("#window-picker input[name=start]", f"{ten_days_back:%Y-%m-%d}")
    page.fill("#window-picker input[name=end]", f"{day_of(last) + DAY:%Y-%m-%d}")
    page.select_option("#window-picker select[name=step]", "day")
    page.click("#window-picker button[type=submit]")
    expect(page).to_have_url(re.compile(r"\?start=[\d-]+&end=[\d-]+&step=day#money$"))
    rows = _agrees(page, live_server)
    by_day = {row["day"]: row for row in rows}
    assert by_day[f"{ten_days_back:%Y-%m-%d}"]["total"] == "5.43"  # long past: no forecast
    assert len(rows) == (day_of(last) + DAY - day_of(ten_days_back)).days


def test_a_refresh_of_a_cluster_pages_body_keeps_the_window(
    page: Page, live_server: Any, sampled: tuple[World, list[datetime]]
) -> None:
    world, _ = sampled
    path = f"/clusters/{world.cluster.pk}/?window=24h&step=hour"
    log_in(page, live_server, path)
    with page.expect_response(
        lambda r: r.request.headers.get("hx-request") == "true" and "/clusters/" in r.url
    ) as refresh:
        pass
    assert "window=24h&step=hour" in refresh.value.url
    assert refresh.value.ok
    expect(page).to_have_url(re.compile(re.escape(path) + "$"))
    # What the body draws again sends back to the same window, and the charts are the
    # window's still.
    scale = page.locator("#cluster-body a", has_text="Scale").first
    expect(scale).to_have_attribute("href", re.compile(r"window%3D24h%26step%3Dhour"))
    assert len(_table(page, "cost-eur")) == 24
    link = page.locator("#chart-cost-eur a.chart-csv").get_attribute("href")
    assert link is not None and link.endswith("?window=24h&step=hour")
    # Another form of the page keeps it too.
    page.fill("#cost-by-label-key", "team")
    page.click("#cost-by-label button[type=submit]")
    expect(page).to_have_url(re.compile(r"\?window=24h&step=hour&label=team#cost-by-label$"))
    assert len(_table(page, "cost-eur")) == 24


def test_a_refused_window_is_said_on_the_page_and_by_the_csv(
    page: Page, live_server: Any, sampled: tuple[World, list[datetime]]
) -> None:
    log_in(page, live_server)
    too_old = day_of(timezone.now()) - 70 * DAY
    by_the_hour = f"start={too_old:%Y-%m-%d}&end={too_old + DAY:%Y-%m-%d}&step=hour"
    for query, said in (
        ("window=9d", "window: Give one of 24h, 7d, 30d, month, last-month (not '9d')."),
        (by_the_hour, "start: Hours are kept 60 days"),
        ("start=2026-12-01", "end: Give the end too"),
    ):
        shown = page.goto(f"{live_server.url}/?{query}")
        assert shown is not None and shown.status == 400, query
        expect(page.locator("#window-errors")).to_contain_text(said)
        expect(page.locator("#money figure.chart")).to_have_count(0)
        expect(page.locator("#month-figures")).to_contain_text("acme")
        refused = page.request.get(f"{live_server.url}/money/cost-eur.csv?{query}")
        assert refused.status == 400 and said in refused.text(), query
    # The presets stay offered: one click away from a window that is answered.
    page.click("#window-picker a[data-window='30d']")
    expect(page).to_have_url(re.compile(r"\?window=30d&step=day#money$"))
    expect(page.locator("#window-errors")).to_have_count(0)
