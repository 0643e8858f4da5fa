"""Lists an operator shapes, in a real browser: the reservations list's columns chosen and
read from the page and from its CSV; that list saved as a view and opened again; two pools
of a cluster selected and scaled with one reason, each scale in the audit log on its own."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from clusters.models import MachinePool
from dashboard.models import SavedView
from gpus.models import VgpuReservation
from tests.e2e.test_browser_bulk_release import orphans_made, wait_for_redraw
from tests.e2e.test_browser_orphans import log_in
from tests.e2e.test_dashboard_browser import PASSWORD
from tests.factories import (
    ClusterFactory,
    ClusterSiteFactory,
    MachinePoolFactory,
)

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


@pytest.fixture
def three_pools(transactional_db: None) -> list[MachinePool]:
    User.objects.create_superuser("admin", password=PASSWORD)
    cluster = ClusterFactory(name="train")
    site = ClusterSiteFactory(cluster=cluster)
    return [MachinePoolFactory(site=site, name=name, replicas=1) for name in ("a", "b", "c")]


def test_two_selected_pools_are_scaled_with_one_reason_each_audited(
    page: Page, live_server: Any, three_pools: list[MachinePool], picture: Any
) -> None:
    a, b, c = three_pools
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{a.cluster_id}/")
    page.get_by_label("Select pool a", exact=True).check()
    page.get_by_label("Select pool c", exact=True).check()
    page.get_by_role("button", name="Scale the selected pools…").click()

    expect(page.locator("main")).to_contain_text("2 pools of train (replicas now): a (1), c (1)")
    page.locator("input[name=replicas]").fill("3")
    page.locator("textarea[name=reason]").fill("training week")
    picture("bulk-scale", page.locator("main"))
    page.get_by_role("button", name="Scale selected").click()

    expect(page.locator("#messages")).to_contain_text("Scaled 2 pools to 3 replicas: a, c.")
    expect(page.locator(f"#pool-{a.pk}")).to_contain_text("3")
    expect(page.locator(f"#pool-{b.pk}")).to_contain_text("1")

    page.goto(f"{live_server.url}/audit/?action=pool.scale")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(2)
    for pool in (a, c):
        expect(page.locator("main")).to_contain_text(str(pool))
    expect(rows.filter(has_text="training week")).to_have_count(2)
    assert [p.replicas for p in MachinePool.objects.order_by("name")] == [3, 1, 3]


def test_selected_pools_stay_selected_through_the_pages_redraw(
    page: Page, live_server: Any, settings: Any, three_pools: list[MachinePool]
) -> None:
    settings.DASHBOARD_POLL_SECONDS = 1
    a, b, _ = three_pools
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{a.cluster_id}/")
    page.get_by_label("Select pool a", exact=True).check()
    page.get_by_label("Select pool c", exact=True).check()
    MachinePool.objects.filter(pk=b.pk).update(replicas=2)
    wait_for_redraw(page, "#cluster-body")

    expect(page.locator(f"#pool-{b.pk}")).to_contain_text("2")  # the redraw brought news
    expect(page.get_by_label("Select pool a", exact=True)).to_be_checked()
    expect(page.get_by_label("Select pool b", exact=True)).not_to_be_checked()
    expect(page.get_by_label("Select pool c", exact=True)).to_be_checked()
    page.get_by_role("button", name="Scale the selected pools…").click()

    expect(page.locator("main")).to_contain_text("2 pools of train (replicas now): a (1), c (1)")


@pytest.fixture
def two_orphans(transactional_db: None) -> list[VgpuReservation]:
    return orphans_made(2, "nl-cols-dc01")


CHOSEN = re.compile(re.escape("cols=name&cols=per_hour"))


def _headings(page: Page) -> list[str]:
    return [text.strip() for text in page.locator("table.reservations thead th").all_inner_texts()]


def test_choose_columns_read_them_in_the_csv_then_save_and_open_the_view(
    page: Page,
    live_server: Any,
    two_orphans: list[VgpuReservation],
    tmp_path: Path,
    picture: Any,
) -> None:
    log_in(page, live_server)
    page.goto(f"{live_server.url}/reservations/?orphaned=true")
    page.locator("details.columns summary").click()
    for key in ("location", "gpu", "state", "vm", "owner", "since", "orphaned", "accrued"):
        page.locator(f"details.columns input[value={key}]").uncheck()
    page.get_by_role("button", name="Filter").click()

    expect(page.locator("table.reservations thead th")).to_have_count(4)
    assert _headings(page)[1:] == ["Name", "Per hour", ""]
    expect(page).to_have_url(CHOSEN)
    shown = {
        r.name: page.locator(f"#reservation-{r.pk} td").nth(2).inner_text() for r in two_orphans
    }

    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    path = tmp_path / "reservations.csv"
    download.value.save_as(path)
    with path.open() as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["id", "name", "vgpu_id", "currency", "cost_per_hour"]
    # The page's figure is the CSV's, to the fourth decimal, in the location's currency.
    assert {row["name"]: f"{row['cost_per_hour']} {row['currency']}" for row in rows} == shown

    page.get_by_label("Save this view as").fill("orphans, cost only")
    page.locator("details.columns").evaluate("details => { details.open = true; }")
    picture("shaped-list", page.locator("main"))
    page.get_by_role("button", name="Save view").click()
    expect(page.locator("#messages")).to_contain_text("View orphans, cost only saved.")
    assert SavedView.objects.get().query == "orphaned=true&sort=-created&cols=name&cols=per_hour"

    page.goto(f"{live_server.url}/reservations/")
    expect(page.locator("table.reservations thead th")).to_have_count(12)
    page.get_by_role("link", name="orphans, cost only").click()
    expect(page).to_have_url(CHOSEN)
    expect(page.locator("table.reservations thead th")).to_have_count(4)
    assert _headings(page)[1:] == ["Name", "Per hour", ""]
