"""The VM and cluster lists' CSV (`/vms/csv/`, `/clusters/csv/`): every row the filters
select, not one page, with the page's figures and the API's (one function each), the
columns chosen (`cols`) as the reservations CSV has them; a bad query answered 400 naming
the problem; a formula a spreadsheet would run defused; as many queries for many rows as
for a few (read per chunk, none per row), and what a hidden column shows not read."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cloud.models import Account, Location, VirtualMachine
from clusters.models import Machine
from gpus.models import vm_hourly_cost
from tests.bench.support import page_queries
from tests.dashboard.conftest import Kube, World
from tests.factories import (
    ClusterFactory,
    ClusterSiteFactory,
    MachineFactory,
    MachinePoolFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
)

pytestmark = pytest.mark.django_db


def api_results(client: Client, url: str) -> list[dict[str, Any]]:
    response = client.get(url, HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def csv_rows(client: Client, url: str) -> list[dict[str, str]]:
    response = client.get(url)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    return list(csv.DictReader(io.StringIO(body)))


@pytest.fixture
def vms(world: World) -> dict[str, VirtualMachine]:
    """The world's two machines' VMs, an orphan and one made outside, priced."""
    Location.objects.filter(pk=world.fresh.pk).update(prices={"vcu": "12.5", "mu": "4.0"})
    VirtualMachine.objects.filter(location=world.fresh).update(vcpus=8, memory_mib=16384)
    now = timezone.now()
    return {
        "held": VirtualMachine.objects.get(vm_id=world.machines[0].vm_id),
        "orphan": VirtualMachineFactory(
            location=world.fresh, name="capvco-prod-gone-0", vcpus=4, memory_mib=6144,
            orphaned_since=now - timedelta(hours=2), orphan_reason="no machine gone-0",
        ),
        "bastion": VirtualMachineFactory(
            location=world.fresh, name="bastion", vcpus=2, memory_mib=3000,
        ),
    }  # fmt: skip


def test_the_vm_csv_has_the_pages_rows_and_figures_and_the_apis(
    admin_client: Client, vms: dict[str, VirtualMachine]
) -> None:
    page = admin_client.get("/vms/")
    shown = {row.vm.pk: row for row in page.context["rows"]}
    answered = {vm["id"]: vm for vm in api_results(admin_client, "/api/v1/vms/")}
    rows = csv_rows(admin_client, "/vms/csv/")

    assert [int(row["id"]) for row in rows] == list(shown)  # newest first, as the page
    assert set(shown) == set(answered) and len(rows) == 4
    for row in rows:
        vm = shown[int(row["id"])]
        assert row["hourly_cost"] == str(vm.hourly) == answered[vm.vm.pk]["hourly_cost"]
        assert Decimal(row["hourly_cost"]) == vm_hourly_cost(vm.vm) > 0
        assert row["currency"] == "EUR" and row["location"] == "nl-fresh-dc01"
        assert row["account"] == "acme" and row["whose"] == vm.whose
    by_name = {row["name"]: row for row in rows}
    held = by_name[vms["held"].name]
    assert (held["whose"], held["cluster"], held["pool"], held["machine"]) == (
        "machine", "prod", "gpu", "gpu-0",
    )  # fmt: skip
    orphan = by_name["capvco-prod-gone-0"]
    assert (orphan["whose"], orphan["orphan_reason"]) == ("orphaned", "no machine gone-0")
    assert orphan["orphaned_since"] == vms["orphan"].orphaned_since.isoformat()  # type: ignore[union-attr]
    assert by_name["bastion"]["whose"] == "not ours"


def test_the_vm_csv_follows_the_filters_and_the_columns_chosen(
    admin_client: Client, vms: dict[str, VirtualMachine]
) -> None:
    rows = csv_rows(admin_client, "/vms/csv/?not_ours=true&cols=per_hour,name")
    assert list(rows[0]) == ["id", "name", "currency", "hourly_cost"]
    assert [row["name"] for row in rows] == ["bastion"]

    # The page's link is its query, less its page.
    html = admin_client.get("/vms/?orphaned=true&cols=name&cols=whose&after=").content.decode()
    export = re.search(r'href="(/vms/csv/[^"]*)"[^>]*>Export CSV', html)
    assert export is not None
    assert export[1] == "/vms/csv/?orphaned=true&amp;cols=name&amp;cols=whose"
    rows = csv_rows(admin_client, export[1].replace("&amp;", "&"))
    assert [list(row.values())[1:] for row in rows] == [
        [
            "capvco-prod-gone-0",
            "orphaned",
            "",
            "",
            "",
            rows[0]["orphaned_since"],
            "no machine gone-0",
        ]
    ]


def test_the_cluster_csv_has_the_pages_figures_and_the_apis(
    admin_client: Client, world: World, kube: Kube
) -> None:
    other = ClusterFactory(account=world.cluster.account, name="edge")
    ClusterSiteFactory(cluster=other, location=world.stale)
    page = admin_client.get("/clusters/")
    summaries = {s.cluster.pk: s for s in page.context["summaries"]}
    answered = {c["id"]: c for c in api_results(admin_client, "/api/v1/clusters/")}
    rows = csv_rows(admin_client, "/clusters/csv/")

    assert [row["name"] for row in rows] == ["edge", "prod"]  # by name, as the page
    assert {int(row["id"]) for row in rows} == set(summaries) == set(answered)
    for row in rows:
        s = summaries[int(row["id"])]
        kubernetes = answered[s.cluster.pk]["kubernetes"]
        assert [row["nodes_ready"], row["nodes"], row["gpu_allocatable"]] == [
            str(kubernetes["nodes_ready"]), str(kubernetes["nodes"]),
            str(kubernetes["gpu_allocatable"]),
        ]  # fmt: skip
        assert row == {
            "id": str(s.cluster.pk), "name": s.cluster.name, "account": "acme",
            "state": s.cluster.state, "locations": ", ".join(s.locations),
            "pools": str(s.pools), "machines": str(s.machines),
            "running": str(s.running), "failed": str(s.failed),
            "gpus_held": str(s.gpus), "nodes_ready": row["nodes_ready"], "nodes": row["nodes"],
            "kube_flags": str(s.kube_flags), "gpu_allocatable": row["gpu_allocatable"],
            "kube_observation": s.kube_observation, "kube_observation_problem": s.kube_problem,
        }  # fmt: skip
    prod = rows[1]
    assert (prod["pools"], prod["machines"], prod["running"], prod["failed"]) == (
        "3",
        "4",
        "3",
        "1",
    )
    assert (prod["gpus_held"], prod["nodes"], prod["nodes_ready"]) == ("2", "4", "3")
    assert (prod["kube_flags"], prod["kube_observation"]) == ("3", "ok")
    assert rows[0]["locations"] == "be-stale-dc02" and rows[0]["kube_observation"] == "not observed"


def test_the_cluster_csv_follows_the_filters_and_the_columns_chosen(
    admin_client: Client, world: World
) -> None:
    ClusterFactory(account=world.cluster.account, name="edge")
    rows = csv_rows(admin_client, "/clusters/csv/?failed=true&cols=failed,name")
    assert rows == [{"id": str(world.cluster.pk), "name": "prod", "failed": "1"}]

    html = admin_client.get("/clusters/?failed=true&cols=name&page=1").content.decode()
    assert 'href="/clusters/csv/?failed=true&amp;cols=name" download>Export CSV' in html


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("/vms/csv/?clustr=prod", "clustr: not a filter of this list (it takes "),
        ("/vms/csv/?after=abc", "after: not a filter of this list"),
        ("/vms/csv/?cols=name,price", "cols: this list has no column 'price' (it has name, "),
        ("/vms/csv/?location=prod", "location: Select a valid choice."),
        ("/vms/csv/?orphaned=maybe", "orphaned: Give true or false."),
        ("/clusters/csv/?clustr=prod", "clustr: not a filter of this list (it takes "),
        ("/clusters/csv/?page=2", "page: not a filter of this list"),
        ("/clusters/csv/?cols=gpus,price", "cols: this list has no column 'price' (it has name, "),
        ("/clusters/csv/?failed=maybe", "failed: Give true or false."),
    ],
)
def test_a_bad_query_is_refused_naming_the_problem(
    admin_client: Client, world: World, query: str, problem: str
) -> None:
    response = admin_client.get(query)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert problem in response.content.decode()


def test_a_formula_is_defused(admin_client: Client, world: World) -> None:
    VirtualMachineFactory(location=world.fresh, name="=HYPERLINK(1)", status="-1+1")
    Account.objects.filter(pk=world.cluster.account_id).update(name="@acme")
    vm = csv_rows(admin_client, "/vms/csv/?not_ours=true")[0]
    assert (vm["name"], vm["status"], vm["account"]) == ("'=HYPERLINK(1)", "'-1+1", "'@acme")
    assert csv_rows(admin_client, "/clusters/csv/?cols=account")[0]["account"] == "'@acme"


def _more_vms(world: World, n: int) -> None:
    """`n` more VMs: a machine's, an orphan and one made outside, in turn."""
    now = timezone.now()
    for i in range(n):
        vm = VirtualMachineFactory(
            location=world.fresh,
            name=f"capvco-prod-x-{i}" if i % 3 else f"outside-{i}",
            orphaned_since=now if i % 3 == 2 else None,
        )
        if i % 3 == 1:
            MachineFactory(pool=world.pool, index=vm.vm_id, vm_id=vm.vm_id)


def _more_clusters(world: World, n: int) -> None:
    """`n` more clusters, each with a site, a pool, a machine of each phase and a GPU."""
    for i in range(n):
        site = ClusterSiteFactory(
            cluster=ClusterFactory(account=world.cluster.account), location=world.fresh
        )
        pool = MachinePoolFactory(site=site)
        for index, phase in enumerate([Machine.Phase.RUNNING, Machine.Phase.FAILED]):
            machine = MachineFactory(
                pool=pool, index=index, phase=phase, vm_id=8000 + 2 * i + index
            )
            VgpuReservationFactory(machine=machine, location=world.fresh)


def _queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as seen:
        assert len(csv_rows(client, url)) > 0
    return [q["sql"] for q in seen.captured_queries]


@pytest.mark.parametrize(
    ("url", "more"),
    [("/vms/csv/", _more_vms), ("/clusters/csv/", _more_clusters)],
    ids=["vms", "clusters"],
)
def test_as_many_queries_for_many_rows_as_for_a_few(
    admin_client: Client, world: World, url: str, more: Callable[[World, int], None]
) -> None:
    more(world, 3)
    few = page_queries(admin_client, url)
    more(world, 60)
    assert page_queries(admin_client, url) == few


def test_a_hidden_column_is_not_read(admin_client: Client, world: World) -> None:
    def tables(url: str) -> set[str]:
        return {
            table
            for sql in _queries(admin_client, url)
            for table in re.findall(r'FROM "(\w+)"', sql.split("WHERE")[0])
        }

    # The machines holding the VMs and those made outside (Whose), the account (Location).
    assert {"clusters_machine"} <= tables("/vms/csv/") - tables("/vms/csv/?cols=name")
    every, few = tables("/clusters/csv/"), tables("/clusters/csv/?cols=name")
    assert {"clusters_machinepool", "gpus_vgpureservation", "clusters_clustersite"} <= (every - few)
