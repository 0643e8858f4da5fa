"""The dashboard in a real browser (Chromium through Playwright) against a live server:
log in, read the capacity board (GPUs attached in whitesky, allocatable in Kubernetes) and
follow it to the nodes behind it, filter reservations, release an orphan with a reason and
find it in the audit log, see a panel refresh itself without a reload, and be sent to the
login page once the session is gone."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.utils import timezone
from playwright.sync_api import Page, expect

from capvco_web.models import AuditEvent
from cloud.models import Cloudspace, Image
from gpus.models import GpuProfile, VgpuReservation
from tests.factories import (
    GpuProfileFactory,
    KubeNodeFactory,
    KubePodFactory,
    LocationFactory,
    MachineFactory,
    MachinePoolFactory,
    VgpuReservationFactory,
)

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")
PASSWORD = "browser-pass-1"
TIMEOUT = 15_000  # ms


@pytest.fixture
def seeded(transactional_db: None, settings: Any) -> dict[str, Any]:
    settings.DASHBOARD_POLL_SECONDS = 1
    now = timezone.now()
    User.objects.create_superuser("admin", password=PASSWORD)
    location = LocationFactory(
        name="nl-browser-dc01",
        vgu_price=Decimal("730"),
        last_complete_observation_at=now,
        observation_started_at=now,
    )
    card = GpuProfileFactory(
        location=location, profile_id="card-1", model="A100 (0000:3b:00.0)", available_instances=6
    )
    pool = MachinePoolFactory(
        site__location=location, site__cluster__account=location.account, gpus=True
    )
    machine = MachineFactory(pool=pool, phase="running", vm_id=4242)
    held = VgpuReservationFactory(machine=machine, location=location, gpu_id="card-1")
    node = KubeNodeFactory(
        cluster=pool.cluster,
        name="node-browser-0",
        machine=machine,
        labels={"capvco.io/gpu-type": "nvidia-a100", "capvco.io/gpu-count": "1"},
    )
    KubePodFactory(cluster=pool.cluster, name="train-browser", node_name=node.name)
    orphan = VgpuReservationFactory(
        orphaned=True,
        location=location,
        name="capvco-gone-m-1-gpu-0",
        gpu_id="card-1",
        orphaned_since=now - timedelta(hours=1),
    )
    return {"card": card, "held": held, "orphan": orphan, "location": location}


def log_in(page: Page, live_server: Any, path: str = "/") -> None:
    page.set_default_timeout(TIMEOUT)
    page.goto(f"{live_server.url}{path}")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(re.escape(path) + r"$"))


def test_log_in_and_read_the_capacity_board(page: Page, live_server: Any, seeded: Any) -> None:
    log_in(page, live_server)
    row = page.locator("#capacity tbody tr", has_text="NVIDIA A100")
    cells = row.locator("td")
    # Location, type, cards, instances, reserved, attached in whitesky, allocatable in
    # Kubernetes, free, fits on one card.
    expect(cells).to_have_text(
        ["nl-browser-dc01", "NVIDIA A100", "1", "8", "1", "1", "1", "6", "6"]
    )
    expect(page.locator("#waste-orphans .big")).to_have_text("1")

    cells.nth(6).get_by_role("link").click()  # the nodes behind the figure
    expect(page).to_have_url(re.compile(r"/nodes/\?location=\d+&gpu_type=nvidia-a100$"))
    node = page.locator("#node-table tbody tr", has_text="node-browser-0")
    expect(node).to_contain_text("default/train-browser")


def test_filter_release_an_orphan_and_find_it_in_the_audit_log(
    page: Page, live_server: Any, seeded: Any
) -> None:
    log_in(page, live_server, "/reservations/")
    table = page.locator("#reservation-table")
    expect(table.locator("tbody tr")).to_have_count(2)
    page.select_option("select[name=orphaned]", "true")  # htmx: only the table is drawn again
    expect(page).to_have_url(re.compile(r"orphaned=true"))
    expect(table.locator("tbody tr")).to_have_count(1)
    orphan = seeded["orphan"]
    table.locator(f"#reservation-{orphan.pk}").get_by_role("link", name="Release").click()
    panel = page.locator("#action-panel")
    expect(panel).to_contain_text("Release vGPU reservation: capvco-gone-m-1-gpu-0")
    panel.locator("textarea[name=reason]").fill("left behind by a deleted machine")
    panel.get_by_role("button", name="Release").click()
    expect(page.locator("#messages")).to_contain_text("Release of capvco-gone-m-1-gpu-0 asked for")
    expect(panel).to_be_empty()
    expect(table.locator(f"#reservation-{orphan.pk}")).to_contain_text("release asked by admin")
    assert VgpuReservation.objects.get(pk=orphan.pk).release_requested_at is not None

    page.click("nav >> text=Audit log")
    event = page.locator("#audit-table tbody tr", has_text="vgpu.release_requested")
    expect(event).to_contain_text("left behind by a deleted machine")
    expect(event).to_contain_text("admin")
    assert AuditEvent.objects.filter(reason="left behind by a deleted machine").count() == 1


def test_a_refused_release_shows_why_in_the_panel(
    page: Page, live_server: Any, seeded: Any
) -> None:
    held = seeded["held"]
    log_in(page, live_server, f"/reservations/{held.pk}/release/")
    page.fill("textarea[name=reason]", "try it")
    page.get_by_role("button", name="Release").click()
    expect(page.locator(".error")).to_contain_text("scale pool")


def test_a_panel_refreshes_itself_without_a_reload(
    page: Page, live_server: Any, seeded: Any
) -> None:
    log_in(page, live_server)
    free = page.locator("#capacity tbody tr", has_text="NVIDIA A100").locator("td").nth(7)
    expect(free).to_have_text("6")
    page.evaluate("window.notReloaded = true")
    GpuProfile.objects.filter(pk=seeded["card"].pk).update(available_instances=2)
    expect(free).to_have_text("2")
    assert page.evaluate("window.notReloaded") is True


def test_a_refresh_after_the_session_ended_goes_to_the_login_page(
    page: Page, live_server: Any, seeded: Any
) -> None:
    log_in(page, live_server, "/reservations/")
    Session.objects.all().delete()  # logged out elsewhere, or expired
    expect(page).to_have_url(re.compile(r"/login/\?next=/reservations/"))
    expect(page.locator("#reservation-table")).to_have_count(0)
    expect(page.locator("#id_username")).to_be_visible()


def test_set_up_a_cluster_with_the_choices_offered(
    page: Page, live_server: Any, seeded: Any
) -> None:
    location = seeded["location"]
    Cloudspace.objects.create(
        location=location, cloudspace_id="cs-77", name="prod", status="DEPLOYED"
    )
    Image.objects.create(location=location, image_id=12, name="Ubuntu 24.04", status="CREATED")
    log_in(page, live_server, "/clusters/")
    page.get_by_role("link", name="New cluster").click()
    page.select_option("#id_account", str(location.account_id))  # the form is redrawn for it
    page.fill("#id_name", "browser")  # typed while the redraw is on its way
    # htmx marks the element whose request is out until its answer is swapped in.
    page.wait_for_function("() => !document.querySelector('.htmx-request')")
    expect(page.locator("#id_name")).to_have_value("browser")  # the name kept
    site = f"site-{location.pk}"
    page.check(f"#id_{site}-use")
    page.select_option(f"#id_{site}-cloudspace", "cs-77")
    page.select_option(f"#id_{site}-image", "12")
    page.fill("#id_pool-0-name", "gpu")
    page.fill("#id_pool-0-replicas", "4")
    page.fill("#id_pool-0-gpu_count", "2")
    page.select_option("#id_pool-0-gpu_type", "NVIDIA A100")
    hint = page.locator("#pool-0-fit")
    expect(hint).to_contain_text("only 3 of 4 machines fit now")  # 6 free on one card, 2 each
    page.fill("#id_pool-0-gpu_count", "1")
    page.locator("#id_pool-0-gpu_count").dispatch_event("change")
    expect(hint).to_contain_text("fits: all 4 machines")
    expect(page.locator(f"#id_{site}-use")).to_be_checked()  # only the hints were redrawn
    page.get_by_role("button", name="Create cluster").click()
    expect(page.locator("h1")).to_have_text("Cluster browser")
    expect(page.locator("#messages")).to_contain_text("Cluster browser created")
    expect(page.locator("#plan")).to_contain_text("the next reconcile takes 4 steps")
