"""A location's cards as allocation bars in a real browser, as HAMi shows per GPU: each
card's instances held per cluster, orphaned, and free, the free count the same as the
API's (`/api/v1/gpu-profiles/`)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from tests.e2e.test_browser_orphans import log_in
from tests.e2e.test_dashboard_browser import PASSWORD
from tests.factories import (
    GpuProfileFactory,
    LocationFactory,
    MachineFactory,
    VgpuReservationFactory,
)

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


@pytest.fixture
def card(transactional_db: None) -> Any:
    User.objects.create_superuser("admin", password=PASSWORD)
    location = LocationFactory(name="nl-cards-dc01", last_complete_observation_at=timezone.now())
    card = GpuProfileFactory(
        location=location, profile_id="card-a", model="A100", available_instances=2
    )
    machine = MachineFactory(pool__site__location=location)
    for n in range(2):
        VgpuReservationFactory(
            location=location, gpu_id="card-a", machine=machine, owner_index=n,
            name=f"capvco-{machine.pool.cluster.name}-{machine.name}-gpu-{n}",
        )  # fmt: skip
    VgpuReservationFactory(
        location=location, gpu_id="card-a", orphaned=True, name="capvco-gone-m-0-gpu-0"
    )
    card.cluster_name = machine.pool.cluster.name
    return card


def test_a_card_shows_its_instances_per_cluster_orphaned_and_free(
    page: Page, live_server: Any, card: Any, picture: Any
) -> None:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="admin"))
    (listed,) = api.get("/api/v1/gpu-profiles/").json()["results"]
    log_in(page, live_server)
    page.goto(f"{live_server.url}/locations/{card.location_id}/")

    bar = page.locator("#card-card-a .allocation")
    expect(bar.locator(".share.held")).to_have_attribute("title", f"cluster {card.cluster_name}: 2")
    expect(bar.locator(".share.orphaned")).to_have_attribute("title", "orphaned: 1")
    expect(bar.locator(".share.free")).to_have_attribute(
        "title", f"free: {listed['available_instances']}"
    )
    assert listed["available_instances"] == 2
    picture("card-allocation", page.locator("#cards"))
