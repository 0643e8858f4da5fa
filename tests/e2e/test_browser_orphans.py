"""Orphans on the overview in a real browser: a VM that no machine owns with its cost,
removed with a reason, and every orphan released at once with one reason, each request
in the audit log."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from capvco_web.models import AuditEvent
from clusters.models import VmRemovalRequest
from gpus.models import VgpuReservation
from tests.e2e.test_dashboard_browser import PASSWORD, TIMEOUT
from tests.factories import LocationFactory, VgpuReservationFactory, VirtualMachineFactory

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


@pytest.fixture
def orphans(transactional_db: None) -> dict[str, Any]:
    now = timezone.now()
    User.objects.create_superuser("admin", password=PASSWORD)
    location = LocationFactory(
        name="nl-orphans-dc01",
        prices={"vcu": "12.0", "mu": "4.0", "vgu": "730.0"},
        vgu_price=Decimal("730"),
        last_complete_observation_at=now,
    )
    vm = VirtualMachineFactory(
        location=location,
        name="capvco-gone-m-1",
        vcpus=4,
        memory_mib=8192,  # 4 x 12 + 8 x 4 = 80.00 a month
        orphaned_since=now - timedelta(hours=2),
        orphan_confirmations=1,
        orphan_reason="no cluster of this account carries its name",
    )
    vgpu = VgpuReservationFactory(
        orphaned=True,
        location=location,
        name="capvco-gone-m-1-gpu-0",
        orphaned_since=now - timedelta(hours=2),
    )
    return {"vm": vm, "vgpu": vgpu}


def log_in(page: Page, live_server: Any) -> None:
    page.set_default_timeout(TIMEOUT)
    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/$"))


def test_an_orphan_vm_shows_its_cost_and_is_removed_with_a_reason(
    page: Page, live_server: Any, orphans: dict[str, Any]
) -> None:
    log_in(page, live_server)
    vm = orphans["vm"]
    row = page.locator(f"#orphan-vm-{vm.vm_id}")
    expect(row).to_contain_text("capvco-gone-m-1")
    expect(row).to_contain_text("0.11 EUR")  # 80.00 a month is 0.1096 an hour
    expect(page.locator("#waste-orphan-vms .big")).to_have_text("1")

    row.get_by_role("link", name="Remove").click()
    panel = page.locator("#action-panel")
    expect(panel).to_contain_text("capvco-gone-m-1")
    # No reason, no removal: the browser itself asks for one before anything is sent.
    expect(panel.locator("textarea[name=reason]")).to_have_attribute("required", "")
    panel.locator("textarea[name=reason]").fill("left by a force delete")
    panel.get_by_role("button", name="Remove").click()
    expect(page.locator("#messages")).to_contain_text("Removal of VM capvco-gone-m-1 asked for")
    assert VmRemovalRequest.objects.get().reason == "left by a force delete"


def test_release_all_orphans_with_one_reason(
    page: Page, live_server: Any, orphans: dict[str, Any]
) -> None:
    log_in(page, live_server)
    page.locator("#orphans-release-all").click()
    panel = page.locator("#action-panel")
    expect(panel).to_contain_text("1 VMs and 1 vGPU reservations")
    expect(panel).to_contain_text("capvco-gone-m-1-gpu-0")
    panel.locator("textarea[name=reason]").fill("clean-up after the outage")
    panel.get_by_role("button", name="Release all").click()
    expect(page.locator("#messages")).to_contain_text("Release asked for 2 orphans")
    assert VgpuReservation.objects.get().release_requested_at is not None
    asked = AuditEvent.objects.filter(reason="clean-up after the outage")
    assert sorted(asked.values_list("action", flat=True)) == [
        "vgpu.release_requested",
        "vm.delete_requested",
    ]


def test_a_vm_not_named_by_us_shows_at_once_with_its_cost_and_is_removed_with_a_reason(
    page: Page, live_server: Any, orphans: dict[str, Any]
) -> None:
    location = orphans["vm"].location
    now = timezone.now()
    location.observation_started_at = now  # a complete listing begun after it was seen
    location.save(update_fields=["observation_started_at"])
    bastion = VirtualMachineFactory(
        location=location,
        name="bastion",
        status="RUNNING",
        vcpus=2,
        memory_mib=4096,  # 2 x 12 + 4 x 4 = 40.00 a month
        first_seen_at=now - timedelta(minutes=5),
        changed_at=now - timedelta(minutes=5),
    )
    log_in(page, live_server)
    row = page.locator(f"#vm-not-ours-{bastion.vm_id}")
    expect(row).to_contain_text("bastion")
    expect(row).to_contain_text("0.05 EUR")  # 40.00 a month is 0.0548 an hour
    expect(page.locator(f"#orphan-vm-{bastion.vm_id}")).to_have_count(0)  # not an orphan

    row.get_by_role("link", name="Remove").click()
    panel = page.locator("#action-panel")
    expect(panel).to_contain_text("Remove VM not named by us")
    panel.locator("textarea[name=reason]").fill("a demo bastion nobody uses")
    panel.get_by_role("button", name="Remove").click()
    expect(page.locator("#messages")).to_contain_text("Removal of VM bastion asked for")
    assert VmRemovalRequest.objects.get().vm_id == bastion.vm_id
    asked = AuditEvent.objects.get(action="vm.delete_requested")
    assert (asked.actor_name, asked.reason) == ("admin", "a demo bastion nobody uses")
