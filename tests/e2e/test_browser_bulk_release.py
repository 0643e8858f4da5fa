"""A bulk action on the rows an operator picked, in a real browser: two of three orphaned
vGPUs selected on the reservations list, released with one reason, each release asked for
and audited on its own; the one not selected is left alone. The list redraws itself while
the operator picks: a tick outlives the redraw, unless its row left the list."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from capvco_web.models import AuditEvent
from gpus.models import VgpuReservation
from tests.e2e.test_browser_orphans import log_in
from tests.e2e.test_dashboard_browser import PASSWORD
from tests.factories import LocationFactory, VgpuReservationFactory

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


def wait_for_redraw(page: Page, selector: str) -> None:
    """Waits until the element at `selector` was replaced by its poll: the old node is marked,
    the new one is not."""
    page.eval_on_selector(selector, "element => { element.dataset.beforeRedraw = 'yes'; }")
    page.wait_for_function(
        "selector => !document.querySelector(selector).dataset.beforeRedraw", arg=selector
    )


def orphans_made(count: int, location_name: str) -> list[VgpuReservation]:
    """The admin, and `count` orphaned vGPUs of one completely observed location, the
    first orphaned most recently."""
    User.objects.create_superuser("admin", password=PASSWORD)
    now = timezone.now()
    location = LocationFactory(name=location_name, last_complete_observation_at=now)
    return [
        VgpuReservationFactory(
            orphaned=True,
            location=location,
            name=f"capvco-gone-m-{n}-gpu-0",
            orphaned_since=now - timedelta(hours=n + 1),
        )
        for n in range(count)
    ]


@pytest.fixture
def three_orphans(transactional_db: None) -> list[VgpuReservation]:
    return orphans_made(3, "nl-bulk-dc01")


def test_the_selected_orphans_are_released_with_one_reason_each_audited(
    page: Page, live_server: Any, three_orphans: list[VgpuReservation]
) -> None:
    picked, left = three_orphans[:2], three_orphans[2]
    log_in(page, live_server)
    page.goto(f"{live_server.url}/reservations/?orphaned=true")
    for reservation in picked:
        page.get_by_label(f"Select {reservation.name}").check()
    page.get_by_role("button", name="Release the selected orphans…").click()

    expect(page.locator("main")).to_contain_text("0 VMs and 2 vGPU reservations")
    expect(page.locator("main")).not_to_contain_text(left.name)
    page.locator("textarea[name=reason]").fill("team x left")
    page.get_by_role("button", name="Release selected").click()

    expect(page.locator("#messages")).to_contain_text("Release asked for 2 orphans")
    asked = AuditEvent.objects.filter(action="vgpu.release_requested", reason="team x left")
    assert sorted(asked.values_list("object_repr", flat=True)) == sorted(
        str(VgpuReservation.objects.get(pk=r.pk)) for r in picked
    )
    assert VgpuReservation.objects.get(pk=left.pk).release_requested_at is None


def test_ticks_outlive_the_lists_redraw_and_the_release_acts_on_exactly_them(
    page: Page, live_server: Any, settings: Any, three_orphans: list[VgpuReservation]
) -> None:
    settings.DASHBOARD_POLL_SECONDS = 1
    kept, gone, left = three_orphans
    log_in(page, live_server)
    page.goto(f"{live_server.url}/reservations/?orphaned=true")
    for reservation in (kept, gone):
        page.get_by_label(f"Select {reservation.name}").check()
    # Released meanwhile, by someone else: the next redraw drops its row, and its tick with it.
    VgpuReservation.objects.filter(pk=gone.pk).update(state=VgpuReservation.State.RELEASED)
    wait_for_redraw(page, "#reservation-table")

    expect(page.locator(f"#reservation-{gone.pk}")).to_have_count(0)
    expect(page.get_by_label(f"Select {kept.name}")).to_be_checked()
    expect(page.get_by_label(f"Select {left.name}")).not_to_be_checked()
    wait_for_redraw(page, "#reservation-table")
    expect(page.get_by_label(f"Select {kept.name}")).to_be_checked()
    page.get_by_role("button", name="Release the selected orphans…").click()

    expect(page.locator("main")).to_contain_text("0 VMs and 1 vGPU reservation")
    page.locator("textarea[name=reason]").fill("picked slowly")
    page.get_by_role("button", name="Release selected").click()

    expect(page.locator("#messages")).to_contain_text("Release asked for 1 orphan")
    asked = AuditEvent.objects.filter(action="vgpu.release_requested", reason="picked slowly")
    assert list(asked.values_list("object_repr", flat=True)) == [
        str(VgpuReservation.objects.get(pk=kept.pk))
    ]
    assert VgpuReservation.objects.filter(release_requested_at__isnull=False).count() == 1
