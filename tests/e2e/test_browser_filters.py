"""The lists' one filter language in a real browser (Chromium through Playwright): the
node list's cluster is picked by id among the clusters of every account (two of one
name told apart by their account), and a misspelt filter in the address shows what is
wrong instead of every node."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.factories import AccountFactory, ClusterFactory, KubeNodeFactory

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")
PASSWORD = "browser-pass-1"
TIMEOUT = 15_000  # ms


@pytest.fixture
def twins(transactional_db: None) -> dict[str, Any]:
    User.objects.create_superuser("admin", password=PASSWORD)
    ours = ClusterFactory(name="prod", account=AccountFactory(name="acme"))
    theirs = ClusterFactory(name="prod", account=AccountFactory(name="globex"))
    KubeNodeFactory(cluster=ours, name="node-acme")
    KubeNodeFactory(cluster=theirs, name="node-globex")
    return {"ours": ours, "theirs": theirs}


def _log_in(page: Page, live_server: Any, path: str) -> None:
    page.set_default_timeout(TIMEOUT)
    page.goto(f"{live_server.url}{path}")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")


def test_a_cluster_is_picked_by_id_and_a_misspelt_filter_is_shown(
    page: Page, live_server: Any, twins: dict[str, Any]
) -> None:
    _log_in(page, live_server, "/nodes/")
    table = page.locator("#node-table")
    expect(table).to_contain_text("node-acme")
    expect(table).to_contain_text("node-globex")

    page.select_option("select[name=cluster]", label="prod (globex)")  # htmx redraws the table
    expect(page).to_have_url(re.compile(rf"/nodes/\?cluster={twins['theirs'].pk}(&|$)"))
    expect(table).to_contain_text("node-globex")
    expect(table).not_to_contain_text("node-acme")

    page.goto(f"{live_server.url}/nodes/?clustr=prod")
    expect(page.locator("#node-table .error")).to_contain_text("clustr: not a filter of this list")
    expect(page.locator("#node-table")).not_to_contain_text("node-acme")
