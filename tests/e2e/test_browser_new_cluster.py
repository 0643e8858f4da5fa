"""The new-cluster form in a real browser (Chromium through Playwright): each pool is
offered the GPU types of its own location, redrawn when its location changes, and a pool
whose GPUs no card there can ever hold is refused on Create, naming what the location
offers, with nothing made; corrected, it is created."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from cloud.models import Cloudspace, Image, Location
from clusters.models import Cluster, MachinePool
from tests.factories import AccountFactory, GpuProfileFactory, LocationFactory

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")
PASSWORD = "browser-pass-1"
TIMEOUT = 15_000  # ms


@pytest.fixture
def locations(transactional_db: None) -> dict[str, Location]:
    """be-browser: A100 (4 per card) and T4 (2 per card); nl-browser: A100 and L40S (4)."""
    User.objects.create_superuser("admin", password=PASSWORD)
    account = AccountFactory(name="acme")
    now = timezone.now()
    found = {}
    for name, cards in [
        ("be-browser", [("A100", 4), ("T4", 2)]),
        ("nl-browser", [("A100", 4), ("L40S", 4)]),
    ]:
        location = LocationFactory(
            account=account, name=name, observation_started_at=now,
            last_complete_observation_at=now,
        )  # fmt: skip
        for model, instances in cards:
            GpuProfileFactory(
                location=location, model=f"{model} 0000:3b:00.0", available_instances=instances
            )
        Cloudspace.objects.create(
            location=location, cloudspace_id=f"cs-{name}", name=f"space-{name}", status="DEPLOYED"
        )
        Image.objects.create(
            location=location, image_id=len(found) + 11, name="Ubuntu 24.04", status="CREATED",
            os_type="Linux",
        )  # fmt: skip
        found[name] = location
    return found


def gpu_types(page: Page) -> list[str]:
    return page.locator("#id_pool-0-gpu_type option").all_inner_texts()


def test_each_pool_is_offered_its_locations_gpu_types_and_what_never_fits_is_refused(
    page: Page, live_server: Any, locations: dict[str, Location]
) -> None:
    be, nl = locations["be-browser"], locations["nl-browser"]
    page.set_default_timeout(TIMEOUT)
    page.goto(f"{live_server.url}/clusters/new/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/clusters/new/$"))

    # The first location (be-browser) is chosen: its types, not the account's.
    assert gpu_types(page) == ["no GPU", "NVIDIA A100", "NVIDIA T4"]
    page.select_option("#id_pool-0-location", str(nl.pk))
    expect(page.locator("#id_pool-0-gpu_type option", has_text="NVIDIA L40S")).to_have_count(1)
    assert gpu_types(page) == ["no GPU", "NVIDIA A100", "NVIDIA L40S"]
    page.select_option("#id_pool-0-location", str(be.pk))
    expect(page.locator("#id_pool-0-gpu_type option", has_text="NVIDIA T4")).to_have_count(1)
    assert gpu_types(page) == ["no GPU", "NVIDIA A100", "NVIDIA T4"]

    # Three T4 per machine: a T4 card holds two.
    page.fill("#id_name", "fresh")
    page.check(f"#id_site-{be.pk}-use")
    page.select_option(f"#id_site-{be.pk}-cloudspace", "cs-be-browser")
    page.select_option(f"#id_site-{be.pk}-image", label="Ubuntu 24.04 (11)")
    page.fill("#id_pool-0-name", "t4")
    page.select_option("#id_pool-0-gpu_type", "NVIDIA T4")
    page.fill("#id_pool-0-gpu_count", "3")
    page.locator("#id_pool-0-gpu_count").press("Tab")
    offers = "be-browser offers NVIDIA A100 (up to 4 per card), NVIDIA T4 (up to 2)."
    expect(page.locator("#pool-0-fit")).to_contain_text("never fits: 3 GPUs of type")
    expect(page.locator("#pool-0-fit")).to_contain_text(offers)

    page.click("button[name=create]")
    expect(page.locator("p.error", has_text="pool t4: gpu_count: 3 GPUs")).to_contain_text(offers)
    assert not Cluster.objects.exists() and not MachinePool.objects.exists()

    page.fill("#id_pool-0-gpu_count", "2")
    page.click("button[name=create]")
    expect(page.locator("h1")).to_contain_text("fresh")
    pool = MachinePool.objects.get(cluster__name="fresh")
    assert (pool.site.location, pool.gpu_type, pool.gpu_count) == (be, "NVIDIA T4", 2)
