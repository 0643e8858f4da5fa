"""The new screens in a real browser (Chromium through Playwright) against a live server:
search from the header and follow a result, read a change in the audit log as a diff, edit
a pool with the plan it makes shown before it is saved, and set a cluster's kubeconfig
without it ever being shown again."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from capvco_web.models import AuditEvent
from clusters.models import Cluster, Machine, MachinePool
from tests.e2e.test_dashboard_browser import log_in
from tests.factories import (
    GpuProfileFactory,
    LocationFactory,
    MachineFactory,
    MachinePoolFactory,
    PodNicFactory,
    VirtualMachineFactory,
)

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")
PASSWORD = "browser-pass-1"
TOKEN = "browser-observer-token"
KUBECONFIG = f"""apiVersion: v1
kind: Config
current-context: prod
contexts:
- name: prod
  context: {{cluster: prod, user: observer}}
clusters:
- name: prod
  cluster: {{server: "https://api.prod.example:6443"}}
users:
- name: observer
  user: {{token: {TOKEN}}}
"""


@pytest.fixture
def seeded(transactional_db: None, settings: Any) -> dict[str, Any]:
    """A cluster `shop` with a pool `web` of one CPU machine that failed (the plan
    provisions it again), a VM with an id, a pod NIC with an address, and a card."""
    settings.DASHBOARD_POLL_SECONDS = 60  # nothing redraws itself under the test's clicks
    now = timezone.now()
    User.objects.create_superuser("admin", password=PASSWORD)
    location = LocationFactory(
        name="nl-screens-dc01",
        vgu_price=Decimal("730"),
        last_complete_observation_at=now,
        observation_started_at=now,
    )
    GpuProfileFactory(location=location, profile_id="card-1", model="A100", available_instances=4)
    pool = MachinePoolFactory(
        name="web",
        site__location=location,
        site__cluster__name="shop",
        site__cluster__account=location.account,
    )
    machine = MachineFactory(
        pool=pool, index=0, phase=Machine.Phase.FAILED, failure_message="no image"
    )
    running = MachinePoolFactory(name="api", site=pool.site, replicas=1)
    up = MachineFactory(pool=running, index=0, phase=Machine.Phase.RUNNING, vm_id=6161)
    VirtualMachineFactory(
        location=location, cloudspace_id=pool.site.cloudspace_id, vm_id=6161, name=up.vm_name
    )
    nic = PodNicFactory(
        cluster=pool.cluster, location=location, mac="02:00:00:12:34:56", ip="10.60.0.9"
    )
    return {"pool": pool, "machine": machine, "up": up, "cluster": pool.cluster, "nic": nic}


def test_search_from_the_header_and_follow_a_result(
    page: Page, live_server: Any, seeded: Any
) -> None:
    log_in(page, live_server)
    box = page.locator("header input[name=q]")
    box.fill("6161")
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"/search/\?q=6161$"))
    exact = page.locator("#search-results tr.exact")
    expect(exact).to_have_count(2)  # the machine with that VM id, and the VM
    machine = page.locator("#search-results tr.exact[data-kind=Machine]")
    expect(machine).to_contain_text("api-0")
    machine.get_by_role("link").click()
    up = seeded["up"]
    expect(page).to_have_url(re.compile(rf"/clusters/\d+/#machine-{up.pk}$"))
    expect(page.locator(f"#machine-{up.pk}")).to_contain_text("api-0")

    page.locator("header input[name=q]").fill("10.60.0.9")
    page.locator("header input[name=q]").press("Enter")
    expect(page.locator("#search-results tr.exact")).to_contain_text("02:00:00:12:34:56")

    page.locator("header input[name=q]").fill("sho")  # part of a name: grouped by kind
    page.locator("header input[name=q]").press("Enter")
    expect(page.locator("#kind-clusters")).to_be_visible()
    expect(page.locator("#search-results")).to_contain_text("shop")


def test_edit_a_pool_see_its_plan_then_save_it_and_read_the_diff(
    page: Page, live_server: Any, seeded: Any
) -> None:
    pool, cluster = seeded["pool"], seeded["cluster"]
    log_in(page, live_server, f"/clusters/{cluster.pk}/")
    page.locator(f"#pool-{pool.pk}").get_by_role("link", name="Edit").click()
    expect(page.locator("h1")).to_have_text(f"Edit pool {pool}")
    page.select_option("#id_gpu_type", "NVIDIA A100")  # a type the location offers
    page.fill("#id_gpu_count", "2")
    page.fill("#id_reason", "the web tier renders on GPUs now")
    page.get_by_role("button", name="Preview the plan").click()

    plan = page.locator("#pool-edit-plan")
    expect(plan).to_contain_text("gpu_count")
    expect(plan.locator("dl.diff")).to_contain_text("0 → 2")
    step = plan.locator("tbody tr", has_text="web-0")
    expect(step).to_contain_text("by this change")
    expect(step).to_contain_text("/card-1")  # its two vGPUs reserved on the A100 card
    expect(plan.locator("#replaced")).to_have_text("No machine is replaced by this change.")
    assert MachinePool.objects.get(pk=pool.pk).gpu_count == 0  # a preview saves nothing
    assert not AuditEvent.objects.filter(action="pool.update").exists()

    page.get_by_role("button", name="Save the change").click()
    expect(page).to_have_url(re.compile(rf"/clusters/{cluster.pk}/#pool-{pool.pk}$"))
    expect(page.locator("#messages")).to_contain_text("gpu_count 0 → 2")
    expect(page.locator(f"#pool-{pool.pk}")).to_contain_text(
        "2 \N{MULTIPLICATION SIGN} NVIDIA A100"
    )

    page.click("nav >> text=Audit log")
    event = page.locator("#audit-table tbody tr", has_text="pool.update")
    expect(event).to_contain_text("the web tier renders on GPUs now")
    diff = event.locator("dl.diff")
    expect(diff.locator("dt")).to_have_text(["gpu_type", "gpu_count"])
    expect(diff.locator("dd").nth(0)).to_have_text("(none) → NVIDIA A100")
    expect(diff.locator("dd").nth(1)).to_have_text("0 → 2")


def test_a_refused_pool_edit_shows_the_services_message(
    page: Page, live_server: Any, seeded: Any
) -> None:
    pool = seeded["pool"]
    log_in(page, live_server, f"/pools/{pool.pk}/edit/")
    page.fill("#id_vcpus", "8")
    page.fill("#id_reason", "more")
    page.get_by_role("button", name="Preview the plan").click()
    expect(page.locator("#pool-edit-plan")).to_contain_text("vcpus")
    Cluster.objects.filter(pk=pool.cluster_id).update(state=Cluster.State.DELETING)
    page.get_by_role("button", name="Save the change").click()
    expect(page.locator("#pool-edit .error").first).to_contain_text("being deleted")
    assert MachinePool.objects.get(pk=pool.pk).vcpus == 4


def test_set_a_kubeconfig_and_see_only_its_server(
    page: Page, live_server: Any, seeded: Any
) -> None:
    cluster = seeded["cluster"]
    log_in(page, live_server, f"/clusters/{cluster.pk}/")
    page.locator("#kubernetes").get_by_role("link", name="Set kubeconfig").click()
    expect(page.locator("#kubeconfig-state")).to_contain_text("None is set")
    page.fill("#id_kubeconfig", KUBECONFIG.replace("api.prod.example", "evil.example"))
    page.fill("#id_reason", "observe it")
    page.get_by_role("button", name="Set kubeconfig").click()
    expect(page.locator("#kubeconfig .error")).to_contain_text("evil.example")
    expect(page.locator("#id_kubeconfig")).to_have_value("")  # never sent back

    page.fill("#id_kubeconfig", KUBECONFIG)
    page.fill("#id_reason", "observe it")
    page.get_by_role("button", name="Set kubeconfig").click()
    expect(page.locator("#messages")).to_contain_text("server https://api.prod.example:6443")
    assert TOKEN not in page.content()
    page.locator("#kubernetes").get_by_role("link", name="Replace kubeconfig").click()
    expect(page.locator("#kubeconfig-state")).to_contain_text(
        re.compile(r"Set on \d{4}-\d\d-\d\d \d\d:\d\d UTC by admin, server https://api\.prod")
    )
    expect(page.locator("#id_kubeconfig")).to_have_value("")
    assert TOKEN not in page.content()
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig == KUBECONFIG.strip()
