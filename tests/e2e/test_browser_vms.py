"""The VM inventory in a real browser: ours (a machine's), orphaned and not ours side by
side, each with what it costs per hour, the same figure the API answers; the list's filters
narrow it as the API's do."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from tests.e2e.test_browser_orphans import log_in, orphans
from tests.factories import MachineFactory, VirtualMachineFactory

__all__ = ["orphans"]
pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


@pytest.fixture
def inventory(orphans: dict[str, Any]) -> dict[str, Any]:
    location = orphans["vm"].location
    now = timezone.now()
    ours = VirtualMachineFactory(
        location=location, name="capvco-prod-gpu-0", status="RUNNING", vcpus=8,
        memory_mib=16384, first_seen_at=now - timedelta(minutes=3),
    )  # fmt: skip
    MachineFactory(
        name="gpu-0", vm_id=ours.vm_id, pool__site__location=location,
        pool__cluster__account=location.account,
    )  # fmt: skip
    bastion = VirtualMachineFactory(
        location=location, name="bastion", status="RUNNING", vcpus=2, memory_mib=4096,
        first_seen_at=now - timedelta(minutes=5),
    )  # fmt: skip
    return {"ours": ours, "orphan": orphans["vm"], "bastion": bastion}


def test_every_vm_shows_whose_it_is_and_the_apis_cost_and_the_filters_narrow_it(
    page: Page, live_server: Any, inventory: dict[str, Any], picture: Any
) -> None:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="admin"))
    answered = {vm["name"]: vm for vm in api.get("/api/v1/vms/").json()["results"]}
    log_in(page, live_server)
    page.goto(f"{live_server.url}/vms/")

    for key, whose in [("ours", "machine gpu-0"), ("orphan", "orphaned"), ("bastion", "not ours")]:
        vm = inventory[key]
        row = page.locator(f"#vm-{vm.pk}")
        expect(row.locator(".whose")).to_contain_text(whose)
        cost = Decimal(answered[vm.name]["hourly_cost"])
        expect(row).to_contain_text(f"{cost} {vm.location.currency}")
    expect(page.locator(f"#vm-{inventory['bastion'].pk}")).to_contain_text("Remove")
    expect(page.locator(f"#vm-{inventory['ours'].pk}")).not_to_contain_text("Remove")
    picture("vm-inventory", page.locator("#vm-table"))

    page.goto(f"{live_server.url}/vms/?not_ours=true")
    expect(page.locator("table.vms tbody tr")).to_have_count(1)
    expect(page.locator(f"#vm-{inventory['bastion'].pk}")).to_be_visible()
    page.goto(f"{live_server.url}/vms/?orphaned=true")
    expect(page.locator("table.vms tbody tr")).to_have_count(1)
    expect(page.locator(f"#vm-{inventory['orphan'].pk}")).to_be_visible()
