"""An object's history in a real browser: a cluster's page narrows its History to one
machine (its changes of phase as the reconciler made them against the whitesky simulator)
or one pool, and the events shown are those `/api/v1/audit/` gives for that object."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from clusters.models import Machine
from tests.e2e.test_dashboard_browser import PASSWORD, log_in
from tests.gpus.conftest import Plane, plane

__all__ = ["plane"]  # the fixture
pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


def api_events(object_type: str, object_id: int) -> list[dict[str, Any]]:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="admin"))
    query = {"object_type": object_type, "object_id": str(object_id)}
    return list(api.get("/api/v1/audit/", query).json()["results"])


def shown(page: Page) -> list[int]:
    rows = page.locator("#history tbody tr[id^=history-]")
    return [
        int(str(rows.nth(n).get_attribute("id")).removeprefix("history-"))
        for n in range(rows.count())
    ]


def test_a_machines_history_is_its_changes_of_phase_as_the_api_gives_them(
    page: Page, live_server: Any, transactional_db: None, plane: Plane, picture: Any
) -> None:
    User.objects.create_superuser("admin", password=PASSWORD)
    cluster = plane.cluster()
    pool = plane.pool(cluster, "web", replicas=2)
    plane.converge(cluster)
    machine = Machine.objects.get(name="web-0")
    events = api_events("clusters.Machine", machine.pk)
    assert {e["action"] for e in events} == {"machine.phase"}
    assert events[-1]["after"]["phase"] == Machine.Phase.RUNNING

    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{cluster.pk}/")
    page.locator(f"#machine-{machine.pk}").get_by_role("link", name="history").click()

    expect(page.locator("#history h2")).to_contain_text("History of machine web-0")
    # Newest first on the page, in id order from the API: the same events.
    assert shown(page) == [e["id"] for e in reversed(events)]
    last = page.locator(f"#history-{events[-1]['id']}")
    expect(last).to_contain_text("machine.phase")
    expect(last).to_contain_text(f"phase: {events[-1]['before']['phase']} → running")
    picture("history", page.locator("#history"))

    page.locator(f"#pool-{pool.pk}").get_by_role("link", name="history").click()
    expect(page.locator("#history h2")).to_contain_text("History of pool web")
    both = [e["id"] for m in Machine.objects.all() for e in api_events("clusters.Machine", m.pk)]
    assert sorted(shown(page)) == sorted(both)

    page.goto(f"{live_server.url}/clusters/{cluster.pk}/?history=machine:999999#history")
    expect(page.locator("#history-problem")).to_contain_text("names no pool or machine")
