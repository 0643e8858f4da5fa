"""Lists an operator shapes, in a real browser: two pools of a cluster selected and scaled
with one reason, each scale in the audit log on its own."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from clusters.models import MachinePool
from tests.e2e.test_browser_orphans import log_in
from tests.e2e.test_dashboard_browser import PASSWORD
from tests.factories import ClusterFactory, ClusterSiteFactory, MachinePoolFactory

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


@pytest.fixture
def three_pools(transactional_db: None) -> list[MachinePool]:
    User.objects.create_superuser("admin", password=PASSWORD)
    cluster = ClusterFactory(name="train")
    site = ClusterSiteFactory(cluster=cluster)
    return [MachinePoolFactory(site=site, name=name, replicas=1) for name in ("a", "b", "c")]


def test_two_selected_pools_are_scaled_with_one_reason_each_audited(
    page: Page, live_server: Any, three_pools: list[MachinePool]
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
