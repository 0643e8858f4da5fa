"""Cost by label on a cluster's page in a real browser: a key typed into its form is kept
in the URL (`?label=team`), each row the page shows (a value's GPUs and cost per hour, the
pods without the label, the idle GPUs apart) holds the same figures as the API's answer
and its CSV (`/api/v1/clusters/<id>/cost-by-label/`), all from one function
(billing.costs.cost_by_label); a key that is not a label key is refused naming it."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from tests.billing.test_costs import labelled, world_make
from tests.e2e.test_dashboard_browser import PASSWORD, log_in

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


def _shown(page: Page) -> list[tuple[str, str, str, str]]:
    rows = page.locator("#cost-by-label-rows tbody tr")
    return [
        (row.get_attribute("data-currency") or "", row.get_attribute("data-name") or "",
         row.locator(".gpus").inner_text(), row.locator(".vgpu").inner_text())
        for row in rows.all()
    ]  # fmt: skip


def test_the_page_shows_the_apis_figures_by_label_with_idle_apart(
    page: Page, live_server: Any, transactional_db: None, picture: Any
) -> None:
    admin = User.objects.create_superuser("admin", password=PASSWORD)
    world = world_make()
    labelled(world)
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{world.cluster.pk}/")

    page.fill("#cost-by-label-key", "team")
    page.locator("#cost-by-label button[type=submit]").click()

    expect(page).to_have_url(re.compile(r"\?label=team#cost-by-label$"))
    expect(page.locator("#cost-by-label-rows")).to_be_visible()
    shown = _shown(page)
    api = APIClient()
    api.force_authenticate(admin)
    url = f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/"
    answer = api.get(url, {"key": "team"}).json()["results"]
    download = api.get(url, {"key": "team", "format": "csv"}).content.decode()
    rows = list(csv.DictReader(io.StringIO(download)))
    assert shown == [(r["currency"], r["name"], str(r["gpus"]), r["vgpu"]) for r in answer]
    assert shown == [(r["currency"], r["name"], r["gpus"], r["vgpu"]) for r in rows]
    # The figures themselves (tests/billing/test_costs.py): node-0's second vGPU is idle,
    # not ml's; node-1's pod has no `team` label.
    assert shown == [
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
