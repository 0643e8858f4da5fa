"""Cost by label on a cluster's page in a real browser: a key typed into its form is kept
in the URL (`?label=team`, beside the page's window), and each row the page shows holds the
same figures as the API's answer and its CSV (`/api/v1/clusters/<id>/cost-by-label/`):
over the page's window (each value's GPU-hours and cost, the pods without the label, the
idle GPUs and the cluster's other cost apart, adding up to what the costs API says the
cluster cost), from one function (billing.selectors.cost_by_label_over), and per hour now,
from another (billing.costs.cost_by_label); a key that is not a label key is refused
naming it."""

from __future__ import annotations

import csv
import io
import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from billing.rollups import HOUR, hour_of, rollups_take
from kube.models import KubePod
from tests.billing.test_costs import labelled, world_make
from tests.e2e.test_dashboard_browser import PASSWORD, log_in

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


def _shown(page: Page, table: str, *cells: str) -> list[tuple[str, ...]]:
    rows = page.locator(f"#{table} tbody tr")
    return [
        (row.get_attribute("data-currency") or "", row.get_attribute("data-name") or "",
         *(row.locator(f".{cell}").inner_text() for cell in cells))
        for row in rows.all()
    ]  # fmt: skip


def _text(value: object) -> str:
    return "" if value is None else str(value)


def test_the_page_shows_the_apis_figures_by_label_over_its_window_and_now(
    page: Page, live_server: Any, transactional_db: None, picture: Any
) -> None:
    admin = User.objects.create_superuser("admin", password=PASSWORD)
    world = world_make()
    labelled(world)
    # Two hours sampled: in the first, vision's pod carried `team: ml`.
    last = hour_of(timezone.now()) - HOUR
    vision = KubePod.objects.filter(namespace="cv")
    vision.update(labels={"team": "ml"})
    rollups_take(now=last - HOUR)
    vision.update(labels={"team": "vision"})
    rollups_take(now=last)
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{world.cluster.pk}/?window=24h&step=hour")

    page.fill("#cost-by-label-key", "team")
    page.locator("#cost-by-label button[type=submit]").click()

    expect(page).to_have_url(re.compile(r"\?window=24h&step=hour&label=team#cost-by-label$"))
    expect(page.locator("#cost-by-label-window")).to_be_visible()
    api = APIClient()
    api.force_authenticate(admin)
    url = f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/"

    # Over the window: the link the page gives answers its rows, as JSON and as CSV.
    over = _shown(page, "cost-by-label-window", "gpu-hours", "cost")
    link = page.locator("#cost-by-label-window-api").get_attribute("href")
    assert link is not None and link.startswith(f"{url}?key=team&start=")
    answer = api.get(link).json()
    download = api.get(f"{link}&format=csv").content.decode()
    assert over == [
        (r["currency"], r["name"], _text(r["gpu_hours"]), r["cost"]) for r in answer["results"]
    ]
    assert over == [
        (r["currency"], r["name"], r["gpu_hours"], r["cost"])
        for r in csv.DictReader(io.StringIO(download))
    ]
    assert over == [
        ("CHF", "ml", "2", "4.0000"),
        ("CHF", "(not attributed)", "", "0.3200"),
        ("EUR", "ml", "4", "4.0000"),  # 1 an hour, and vision's 2 in the first
        ("EUR", "vision", "2", "2.0000"),
        ("EUR", "(no label)", "2", "2.0000"),
        ("EUR", "(idle)", "2", "2.0000"),
        ("EUR", "(not attributed)", "", "3.0400"),
    ]
    # Per currency the rows add up to the cluster's cost over the page's window, as the
    # costs API answers it for the money section's link.
    series = page.locator("#window-shown a[data-api]").get_attribute("href")
    assert series is not None
    costs = api.get(series).json()["results"]
    for currency in ("CHF", "EUR"):
        assert sum(Decimal(row[3]) for row in over if row[0] == currency) == sum(
            Decimal(point["total"]) for point in costs
            if point["currency"] == currency and point["cluster"] == world.cluster.pk
        )  # fmt: skip
    expect(page.locator("#cost-by-label-window-csv")).to_have_attribute(
        "href", f"{link}&format=csv"
    )

    # Per hour now.
    now = _shown(page, "cost-by-label-rows", "gpus", "vgpu")
    answer = api.get(url, {"key": "team"}).json()["results"]
    download = api.get(url, {"key": "team", "format": "csv"}).content.decode()
    rows = list(csv.DictReader(io.StringIO(download)))
    assert now == [(r["currency"], r["name"], str(r["gpus"]), r["vgpu"]) for r in answer]
    assert now == [(r["currency"], r["name"], r["gpus"], r["vgpu"]) for r in rows]
    # The figures themselves (tests/billing/test_costs.py): node-0's second vGPU is idle,
    # not ml's; node-1's pod has no `team` label.
    assert now == [
        ("CHF", "ml", "1", "2.0000"),
        ("EUR", "ml", "1", "1.0000"),
        ("EUR", "vision", "2", "2.0000"),
        ("EUR", "(no label)", "1", "1.0000"),
        ("EUR", "(idle)", "1", "1.0000"),
    ]
    expect(page.locator("#cost-by-label-csv")).to_have_attribute(
        "href", f"{url}?key=team&format=csv"
    )
    picture("cost-by-label", page.locator("#cost-by-label"))

    page.fill("#cost-by-label-key", "Team!")
    with page.expect_response(lambda r: "label=Team" in r.url) as answered:
        page.locator("#cost-by-label button[type=submit]").click()
    assert answered.value.status == 400
    expect(page.locator("#cost-by-label-problem")).to_have_text(
        "'Team!' is not a label key: its name must be 1 to 63 letters, digits, '-', '_' or "
        "'.', starting and ending with a letter or digit."
    )
    expect(page.locator("#cost-by-label-rows")).to_have_count(0)
    expect(page.locator("#cost-by-label-window")).to_have_count(0)
