"""Failures where the operator looks first, in a real browser (Chromium through Playwright)
against a live server: the clusters list marks a cluster whose Kubernetes observation
fails; the cluster's "by pods not scheduled yet" figure leads to the pending GPU pods and
why each waits; the overview leads to a location's page, its per-card map and its plan."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from cloud.models import Account
from clusters.models import Cluster
from kube.models import KubePod
from tests.e2e.test_dashboard_browser import PASSWORD, log_in
from tests.factories import (
    ClusterFactory,
    GpuProfileFactory,
    KubeNodeFactory,
    KubePodFactory,
    LocationFactory,
    MachineFactory,
    MachinePoolFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
    kube_observed_as,
)

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")
A100 = {"capvco.io/gpu-type": "nvidia-a100"}


@pytest.fixture
def seeded(transactional_db: None, settings: Any) -> dict[str, Any]:
    now = timezone.now()
    User.objects.create_superuser("admin", password=PASSWORD)
    location = LocationFactory(
        name="nl-visible-dc01", last_complete_observation_at=now, observation_started_at=now
    )
    Account.objects.filter(pk=location.account_id).update(orphan_auto_release=True)
    GpuProfileFactory(
        location=location, profile_id="card-v", model="A100 (0000:3b:00.0)", available_instances=3
    )
    pool = MachinePoolFactory(
        site__location=location,
        site__cluster__account=location.account,
        site__cluster__name="train",
        gpus=True,
    )
    cluster = pool.cluster
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig="apiVersion: v1\nkind: Config\n")
    kube_observed_as(cluster, complete=True, started_at=now, last_complete_at=now)
    machine = MachineFactory(pool=pool, phase="running", vm_id=4343)
    VirtualMachineFactory(location=location, vm_id=4343, name=machine.vm_name)
    VgpuReservationFactory(machine=machine, location=location, gpu_id="card-v")
    node = KubeNodeFactory(cluster=cluster, name="node-v-0", machine=machine, labels=A100)
    KubePodFactory(cluster=cluster, namespace="ml", name="holds-gpu", node_name=node.name)
    for name, gpu_type in (("wants-a100", "nvidia-a100"), ("wants-h100", "nvidia-h100")):
        KubePodFactory(
            cluster=cluster,
            namespace="ml",
            name=name,
            node_name="",
            phase=KubePod.Phase.PENDING,
            gpu_type=gpu_type,
        )
    orphan = VgpuReservationFactory(
        orphaned=True,
        location=location,
        name="capvco-train-gone-0-gpu-0",
        owner_cluster="train",
        owner_machine="gone-0",
        gpu_id="card-v",
        orphaned_since=now - timedelta(hours=2),
        orphan_confirmations=3,
    )
    broken = ClusterFactory(account=location.account, name="broken")
    Cluster.objects.filter(pk=broken.pk).update(kubeconfig="apiVersion: v1\nkind: Config\n")
    kube_observed_as(
        broken, complete=False, started_at=now, error="pods: HTTP 503 from the API server"
    )
    return {
        "location": location,
        "cluster": cluster,
        "broken": broken,
        "machine": machine,
        "orphan": orphan,
    }


def test_the_clusters_list_marks_the_cluster_whose_observation_fails(
    page: Page, live_server: Any, seeded: dict[str, Any]
) -> None:
    log_in(page, live_server, "/clusters/")
    broken = page.locator(f"#cluster-{seeded['broken'].pk} td.kube-observation")
    expect(broken.locator(".badge.fail")).to_have_text("observation failing")
    expect(broken).to_contain_text("HTTP 503")
    healthy = page.locator(f"#cluster-{seeded['cluster'].pk} td.kube-observation")
    expect(healthy).to_have_text("ok")
    broken.locator("a.badge").click()
    expect(page.locator("#kubernetes")).to_contain_text("HTTP 503 from the API server")

    page.goto(f"{live_server.url}/")
    expect(page.locator("#flag-kube-failing .big")).to_have_text("1")
    expect(page.locator("#kube-failing")).to_contain_text("broken")


def test_the_unscheduled_figure_leads_to_the_pending_pods_and_why(
    page: Page, live_server: Any, seeded: dict[str, Any]
) -> None:
    log_in(page, live_server, f"/clusters/{seeded['cluster'].pk}/")
    page.locator("#pending-pods-link").click()
    expect(page.locator("h1")).to_contain_text("Pending GPU pods of train")
    table = page.locator("#pod-table")
    expect(table.locator("tbody tr")).to_have_count(2)
    a100 = table.locator("tr", has_text="ml/wants-a100")
    expect(a100).to_contain_text("all GPU type nvidia-a100 requested: 1 of 1 on 1 node")
    h100 = table.locator("tr", has_text="ml/wants-h100")
    expect(h100).to_contain_text("no Ready node with GPU type nvidia-h100")
    expect(table).not_to_contain_text("holds-gpu")


def test_the_overview_leads_to_the_location_map_and_its_plan(
    page: Page, live_server: Any, seeded: dict[str, Any]
) -> None:
    log_in(page, live_server)
    location = seeded["location"]
    page.locator("#capacity").get_by_role("link", name=location.name).first.click()
    expect(page.locator("h1")).to_have_text(f"Location {location.name}")
    card = page.locator("#card-card-v")
    expect(card).to_contain_text("5 instances: 2 held, 3 free")
    machine = seeded["machine"]
    held = card.locator("tr", has_text=f"train/{machine.name}")
    expect(held).to_contain_text(machine.vm_name)
    expect(held).to_contain_text("node-v-0")
    expect(held).to_contain_text("ml/holds-gpu")
    plan = page.locator("#location-plan")
    expect(plan.locator("h2")).to_contain_text("the next orphan sweep takes 1 step")
    expect(plan).to_contain_text(seeded["orphan"].name)
    held.get_by_role("link").click()
    expect(page).to_have_url(
        f"{live_server.url}/clusters/{seeded['cluster'].pk}/#machine-{machine.pk}"
    )
