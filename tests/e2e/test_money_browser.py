"""The money charts in a real browser (Chromium through Playwright) against a live server:
the overview's and a cluster page's charts render (non-empty pictures, a bar for each
figure of their tables), their tables hold the figures computed by hand, the Content-
Security-Policy refuses nothing, and without JavaScript the pictures are there all the
same. Screenshots of both pages are left in /tmp for a person to look at."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from billing.rollups import DAY, HOUR, month_of, rollups_take
from tests.billing.support import world_leaks
from tests.billing.test_costs import World, world_make
from tests.e2e.test_dashboard_browser import PASSWORD, log_in

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")
# Outside the repository: for a person to look at, not to keep.
SCREENSHOTS = Path(
    os.environ.get("CAPVCO_SCREENSHOTS", Path(tempfile.gettempdir()) / "capvco-money-screens")
)


@pytest.fixture
def sampled(transactional_db: None, settings: Any) -> tuple[World, list[datetime]]:
    """The costs world, sampled at midnight of each day of this month whose first hour is
    over: each such day has one hour of history (prod 4.40 EUR; prod 2.16 CHF) and the
    ledger's leaks of that hour (orphans 1.03 EUR)."""
    settings.DASHBOARD_POLL_SECONDS = 60
    User.objects.create_superuser("admin", password=PASSWORD)
    world = world_make()
    now = timezone.now()
    days = []
    day = month_of(now)
    # Only days whose first hour is over: a leak of an hour still running costs only its
    # part so far (at 00:20 UTC, today's orphans are 0.22, not 1.03).
    while day + HOUR <= now:
        rollups_take(now=day)
        world_leaks(world, day, day + HOUR)
        days.append(day)
        day += DAY
    return world, days


def _table(page: Page, key: str) -> list[dict[str, str]]:
    """A chart's table, as the browser shows it once its numbers are opened."""
    figure = page.locator(f"#chart-{key}")
    figure.locator("summary").click()
    table = figure.locator("table.chart-table")
    expect(table).to_be_visible()
    columns = [cell.strip() for cell in table.locator("thead th").all_inner_texts()]
    rows = []
    for row in table.locator("tbody tr").all():
        cells = [cell.strip() for cell in row.locator("th, td").all_inner_texts()]
        rows.append(dict(zip(columns, cells, strict=True)))
    return rows


def _drawn(page: Page, key: str) -> None:
    box = page.locator(f"#chart-{key} svg").bounding_box()
    assert box is not None and box["width"] > 200 and box["height"] > 50, (key, box)


def _bars_match_table(page: Page, key: str, rows: list[dict[str, str]]) -> int:
    """Each figure above zero of the table is a bar of the picture."""
    figures = sum(
        1 for row in rows for column, value in row.items()
        if column not in ("day", "total") and float(value) > 0
    )  # fmt: skip
    bars = page.locator(f"#chart-{key} svg rect.bar").count()
    assert bars == figures > 0, (key, bars, figures)
    return bars


def test_the_overview_and_a_cluster_page_draw_their_money_charts(
    page: Page, browser: Browser, live_server: Any, sampled: tuple[World, list[datetime]]
) -> None:
    world, days = sampled
    if not days:
        pytest.skip("the month's first hour: no day of it has a whole hour to chart yet")
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    log_in(page, live_server)

    expect(page.locator("#month-figures")).to_contain_text("acme")
    eur = _table(page, "cost-eur")
    sampled_days = {f"{day:%Y-%m-%d}" for day in days}
    for row in eur:
        if row["day"] in sampled_days:
            assert (row["prod"], row["orphans"]) == ("4.40", "1.03"), row
        else:
            assert row["prod"] == row["orphans"] == "0.00", row
    assert len(eur) >= 28 and all(float(row["forecast"]) > 0 for row in eur[len(days) :])
    _drawn(page, "cost-eur")
    _bars_match_table(page, "cost-eur", eur)
    waste = _table(page, "waste-chf")
    idle = [row["idle GPUs"] for row in waste if row["day"] in sampled_days]
    assert idle == ["2.00"] * len(days)  # node-4, 2 CHF/h
    _drawn(page, "waste-chf")
    assert page.locator("#chart-waste-chf svg polyline.line").count() == 2
    page.screenshot(path=str(SCREENSHOTS / "overview.png"), full_page=True)

    page.goto(f"{live_server.url}/clusters/{world.cluster.pk}/")
    pools = _table(page, "cost-eur")
    first = next(row for row in pools if row["day"] == f"{days[0]:%Y-%m-%d}")
    assert (first["gpu (nl-ams)"], first["cpu (nl-ams)"]) == ("4.36", "0.04")
    _drawn(page, "cost-eur")
    _bars_match_table(page, "cost-eur", pools)
    page.locator("#money").screenshot(path=str(SCREENSHOTS / "cluster-money.png"))
    assert not [text for text in refused if "Content Security Policy" in text], refused

    # Without JavaScript the same pictures are on the page.
    static = browser.new_context(
        java_script_enabled=False, storage_state=page.context.storage_state()
    )
    try:
        plain = static.new_page()
        plain.goto(f"{live_server.url}/clusters/{world.cluster.pk}/")
        _drawn(plain, "cost-eur")
        assert plain.locator("#chart-cost-eur svg rect.bar").count() > 0
    finally:
        static.close()
