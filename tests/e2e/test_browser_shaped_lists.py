"""Lists an operator shapes, in a real browser: the reservations, VM and cluster lists'
columns chosen and read from the page, from its CSV and from the API; the reservations and
node lists saved as a view and opened again; two pools of a cluster selected and scaled
with one reason, each scale in the audit log on its own."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from clusters.models import Machine, MachinePool
from dashboard.models import SavedView
from gpus.models import VgpuReservation
from kube.models import KubeNode
from tests.e2e.test_browser_bulk_release import orphans_made, wait_for_redraw
from tests.e2e.test_browser_orphans import log_in, orphans
from tests.e2e.test_browser_vms import inventory
from tests.e2e.test_dashboard_browser import PASSWORD
from tests.factories import (
    ClusterFactory,
    ClusterSiteFactory,
    KubeNodeFactory,
    MachineFactory,
    MachinePoolFactory,
)

__all__ = ["inventory", "orphans"]
pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


@pytest.fixture
def three_pools(transactional_db: None) -> list[MachinePool]:
    User.objects.create_superuser("admin", password=PASSWORD)
    cluster = ClusterFactory(name="train")
    site = ClusterSiteFactory(cluster=cluster)
    return [MachinePoolFactory(site=site, name=name, replicas=1) for name in ("a", "b", "c")]


def test_two_selected_pools_are_scaled_with_one_reason_each_audited(
    page: Page, live_server: Any, three_pools: list[MachinePool], picture: Any
) -> None:
    a, b, c = three_pools
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{a.cluster_id}/")
    page.get_by_label("Select pool a", exact=True).check()
    page.get_by_label("Select pool c", exact=True).check()
    page.get_by_role("button", name="Scale the selected pools…").click()

    expect(page.locator("main")).to_contain_text("2 pools of train (replicas now): a (1), c (1)")
    page.locator("input[name=replicas]").fill("3")
    page.locator("textarea[name=reason]").fill("training week")
    picture("bulk-scale", page.locator("main"))
    page.get_by_role("button", name="Scale selected").click()

    expect(page.locator("#messages")).to_contain_text("Scaled 2 pools to 3 replicas: a, c.")
    expect(page.locator(f"#pool-{a.pk}")).to_contain_text("3")
    expect(page.locator(f"#pool-{b.pk}")).to_contain_text("1")

    page.goto(f"{live_server.url}/audit/?action=pool.scale")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(2)
    for pool in (a, c):
        expect(page.locator("main")).to_contain_text(str(pool))
    expect(rows.filter(has_text="training week")).to_have_count(2)
    assert [p.replicas for p in MachinePool.objects.order_by("name")] == [3, 1, 3]


def test_selected_pools_stay_selected_through_the_pages_redraw(
    page: Page, live_server: Any, settings: Any, three_pools: list[MachinePool]
) -> None:
    settings.DASHBOARD_POLL_SECONDS = 1
    a, b, _ = three_pools
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{a.cluster_id}/")
    page.get_by_label("Select pool a", exact=True).check()
    page.get_by_label("Select pool c", exact=True).check()
    MachinePool.objects.filter(pk=b.pk).update(replicas=2)
    wait_for_redraw(page, "#cluster-body")

    expect(page.locator(f"#pool-{b.pk}")).to_contain_text("2")  # the redraw brought news
    expect(page.get_by_label("Select pool a", exact=True)).to_be_checked()
    expect(page.get_by_label("Select pool b", exact=True)).not_to_be_checked()
    expect(page.get_by_label("Select pool c", exact=True)).to_be_checked()
    page.get_by_role("button", name="Scale the selected pools…").click()

    expect(page.locator("main")).to_contain_text("2 pools of train (replicas now): a (1), c (1)")


@pytest.fixture
def two_orphans(transactional_db: None) -> list[VgpuReservation]:
    return orphans_made(2, "nl-cols-dc01")


CHOSEN = re.compile(re.escape("cols=name&cols=per_hour"))


def _headings(page: Page) -> list[str]:
    return [text.strip() for text in page.locator("table.reservations thead th").all_inner_texts()]


def test_choose_columns_read_them_in_the_csv_then_save_and_open_the_view(
    page: Page,
    live_server: Any,
    two_orphans: list[VgpuReservation],
    tmp_path: Path,
    picture: Any,
) -> None:
    log_in(page, live_server)
    page.goto(f"{live_server.url}/reservations/?orphaned=true")
    page.locator("details.columns summary").click()
    for key in ("location", "gpu", "state", "vm", "owner", "since", "orphaned", "accrued"):
        page.locator(f"details.columns input[value={key}]").uncheck()
    page.get_by_role("button", name="Filter").click()

    expect(page.locator("table.reservations thead th")).to_have_count(4)
    assert _headings(page)[1:] == ["Name", "Per hour", ""]
    expect(page).to_have_url(CHOSEN)
    shown = {
        r.name: page.locator(f"#reservation-{r.pk} td").nth(2).inner_text() for r in two_orphans
    }

    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    path = tmp_path / "reservations.csv"
    download.value.save_as(path)
    with path.open() as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["id", "name", "vgpu_id", "currency", "cost_per_hour"]
    # The page's figure is the CSV's, to the fourth decimal, in the location's currency.
    assert {row["name"]: f"{row['cost_per_hour']} {row['currency']}" for row in rows} == shown

    page.get_by_label("Save this view as").fill("orphans, cost only")
    page.locator("details.columns").evaluate("details => { details.open = true; }")
    picture("shaped-list", page.locator("main"))
    page.get_by_role("button", name="Save view").click()
    expect(page.locator("#messages")).to_contain_text("View orphans, cost only saved.")
    assert SavedView.objects.get().query == "orphaned=true&sort=-created&cols=name&cols=per_hour"

    page.goto(f"{live_server.url}/reservations/")
    expect(page.locator("table.reservations thead th")).to_have_count(12)
    page.get_by_role("link", name="orphans, cost only").click()
    expect(page).to_have_url(CHOSEN)
    expect(page.locator("table.reservations thead th")).to_have_count(4)
    assert _headings(page)[1:] == ["Name", "Per hour", ""]


def _api(path: str) -> list[dict[str, Any]]:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="admin"))
    results: list[dict[str, Any]] = api.get(path).json()["results"]
    return results


def _choose(page: Page, keep: list[str]) -> None:
    """Tick only the columns `keep` in the list's chooser, and filter."""
    page.locator("details.columns summary").click()
    for box in page.locator("details.columns input[name=cols]").all():
        box.set_checked(box.get_attribute("value") in keep)
    page.get_by_role("button", name="Filter").or_(page.get_by_role("button", name="Show")).click()


def _download(page: Page, tmp_path: Path) -> list[dict[str, str]]:
    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    with path.open() as file:
        return list(csv.DictReader(file))


def _cells(page: Page, row: str) -> list[str]:
    return [text.strip() for text in page.locator(f"{row} td").all_inner_texts()]


def test_choose_vm_columns_and_read_them_in_the_csv_as_on_the_page_and_the_api(
    page: Page, live_server: Any, inventory: dict[str, Any], tmp_path: Path
) -> None:
    answered = {vm["id"]: vm for vm in _api("/api/v1/vms/")}
    log_in(page, live_server)
    page.goto(f"{live_server.url}/vms/")
    _choose(page, ["name", "whose", "per_hour"])

    expect(page).to_have_url(re.compile(re.escape("cols=name&cols=whose&cols=per_hour")))
    expect(page.locator("table.vms thead th")).to_have_count(4)
    rows = _download(page, tmp_path)
    assert list(rows[0]) == [
        "id", "name", "whose", "cluster", "pool", "machine", "orphaned_since", "orphan_reason",
        "currency", "hourly_cost",
    ]  # fmt: skip
    assert len(rows) == 3 and {int(row["id"]) for row in rows} == set(answered)
    for row in rows:
        vm = answered[int(row["id"])]
        name, whose, per_hour, _ = _cells(page, f"#vm-{row['id']}")
        # The page's figure is the CSV's and the API's, in the location's currency.
        assert per_hour == f"{row['hourly_cost']} {row['currency']}"
        assert row["hourly_cost"] == vm["hourly_cost"] and row["name"] == vm["name"] == name
        assert whose.startswith(row["whose"]), (whose, row)
    held = next(row for row in rows if row["whose"] == "machine")
    assert (
        held["machine"] == "gpu-0"
        and f"machine gpu-0 of {held['cluster']}" in _cells(page, f"#vm-{held['id']}")[1]
    )


@pytest.fixture
def two_clusters(transactional_db: None) -> list[Any]:
    """train: two pools, a running machine (its node Ready), a failed one, a node not
    Ready that no machine owns; infer: a pool of one running machine."""
    User.objects.create_superuser("admin", password=PASSWORD)
    train = ClusterFactory(name="train")
    pool = MachinePoolFactory(site=ClusterSiteFactory(cluster=train), name="gpu")
    MachinePoolFactory(site=pool.site, name="cpu")
    running = MachineFactory(pool=pool, index=0, phase=Machine.Phase.RUNNING, vm_id=7000)
    MachineFactory(pool=pool, index=1, phase=Machine.Phase.FAILED)
    KubeNodeFactory(cluster=train, name="gpu-0", machine=running, gpu_allocatable=2)
    KubeNodeFactory(
        cluster=train, name="stray", ready=False, gpu_allocatable=0, unowned_since=timezone.now()
    )
    infer = ClusterFactory(name="infer", account=train.account)
    MachineFactory(
        pool=MachinePoolFactory(
            site=ClusterSiteFactory(cluster=infer, location=pool.site.location)
        ),
        phase=Machine.Phase.RUNNING,
    )
    return [infer, train]


def test_choose_cluster_columns_and_read_them_in_the_csv_as_on_the_page_and_the_api(
    page: Page, live_server: Any, two_clusters: list[Any], tmp_path: Path
) -> None:
    answered = {c["id"]: c["kubernetes"] for c in _api("/api/v1/clusters/")}
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/")
    _choose(page, ["name", "machines", "failed", "nodes", "gpu_allocatable"])

    expect(page.locator("table.clusters thead th")).to_have_count(5)
    rows = _download(page, tmp_path)
    assert list(rows[0]) == [
        "id", "name", "machines", "failed", "nodes_ready", "nodes", "kube_flags",
        "gpu_allocatable",
    ]  # fmt: skip
    assert [row["name"] for row in rows] == ["infer", "train"]  # by name, as the page
    for row in rows:
        kubernetes = answered[int(row["id"])]
        shown = _cells(page, f"#cluster-{row['id']}")
        flags = f" {row['kube_flags']}" if row["kube_flags"] != "0" else ""
        assert shown == [
            row["name"], row["machines"], row["failed"],
            f"{row['nodes_ready']}/{row['nodes']}{flags}", row["gpu_allocatable"],
        ]  # fmt: skip
        assert (int(row["nodes_ready"]), int(row["nodes"]), int(row["gpu_allocatable"])) == (
            kubernetes["nodes_ready"], kubernetes["nodes"], kubernetes["gpu_allocatable"],
        )  # fmt: skip
    train = rows[1]
    assert (train["machines"], train["failed"], train["nodes_ready"], train["nodes"]) == (
        "2", "1", "1", "2",
    )  # fmt: skip
    assert (train["kube_flags"], train["gpu_allocatable"]) == ("1", "2")


def test_choose_node_columns_then_save_and_open_the_view(
    page: Page, live_server: Any, two_clusters: list[Any]
) -> None:
    stray = KubeNode.objects.get(name="stray")
    log_in(page, live_server)
    page.goto(f"{live_server.url}/nodes/?flag=unowned")
    _choose(page, ["name", "ready", "flags"])

    expect(page.locator("table.nodes thead th")).to_have_count(3)
    assert _cells(page, f"#node-{stray.pk}")[:2] == ["stray\nv1.33.1", "not ready"]
    page.get_by_label("Save this view as").fill("strays")
    page.get_by_role("button", name="Save view").click()
    expect(page.locator("#messages")).to_contain_text("View strays saved.")
    assert SavedView.objects.get().query == "flag=unowned&cols=name&cols=ready&cols=flags"

    page.goto(f"{live_server.url}/nodes/")
    expect(page.locator("table.nodes thead th")).to_have_count(10)
    page.get_by_role("link", name="strays").click()
    expect(page.locator("table.nodes thead th")).to_have_count(3)
    expect(page.locator("table.nodes tbody tr")).to_have_count(1)
