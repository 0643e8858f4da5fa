"""The columns an operator chooses on the reservations, VM, cluster and node lists (`cols`): the
page shows those, the reservations CSV has the same ones, a column hidden is not read, and a
column the list has not is refused naming the ones it has."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.lists import LISTS, NODE_COLUMNS
from tests.dashboard.conftest import Kube, World

pytestmark = pytest.mark.django_db


def headings(html: str, table: str) -> list[str]:
    head = re.search(rf'<table class="{table}">\s*<thead><tr>(.*?)</tr></thead>', html, re.S)
    assert head is not None, html
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(r"<th[^>]*>(.*?)</th>", head[1], re.S)
    ]


def csv_rows(client: Client, query: str) -> list[dict[str, str]]:
    response = client.get(f"/reservations/csv/?{query}")
    assert response.status_code == 200, response.content
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    return list(csv.DictReader(io.StringIO(body)))


def test_the_reservations_list_shows_the_columns_chosen_and_its_csv_has_them(
    admin_client: Client, world: World
) -> None:
    query = "orphaned=true&cols=name,per_hour,location"
    response = admin_client.get(f"/reservations/?{query}")
    assert response.status_code == 200
    html = response.content.decode()
    # The list's order, whatever the order asked; the selection and the actions stay.
    assert headings(html, "reservations") == ["Select", "Name", "Location", "Per hour", ""]
    assert world.orphan.name in html and "(gone)" not in html  # the owner column is hidden
    export = re.search(r'href="(/reservations/csv/\?[^"]*)"', html)
    assert export is not None and "cols=name%2Cper_hour%2Clocation" in export[1]

    rows = csv_rows(admin_client, query)
    assert list(rows[0]) == ["id", "name", "location", "vgpu_id", "currency", "cost_per_hour"]
    by_name = {row["name"]: row for row in rows}
    assert by_name[world.orphan.name]["cost_per_hour"] == "1.0000"
    assert set(by_name) == {world.orphan.name, world.leak.name}


def test_the_columns_sent_by_the_chooser_once_each_read_the_same(
    admin_client: Client, world: World
) -> None:
    html = admin_client.get("/reservations/?cols=state&cols=name").content.decode()
    assert headings(html, "reservations") == ["Select", "Name", "State", ""]
    assert 'name="cols" value="state" checked' in html
    assert 'name="cols" value="owner">' in html  # offered, not shown


def test_without_cols_every_column_and_the_whole_csv(admin_client: Client, world: World) -> None:
    html = admin_client.get("/reservations/").content.decode()
    assert headings(html, "reservations")[1:-1] == [
        "Name", "Location", "GPU", "State", "VM", "Owner", "Since", "Orphaned", "Per hour",
        "Accrued",
    ]  # fmt: skip
    assert "accrued_cost" in csv_rows(admin_client, "orphaned=true")[0]


@pytest.mark.parametrize(
    "path",
    [
        "/reservations/", "/reservations/csv/", "/vms/", "/vms/csv/", "/clusters/",
        "/clusters/csv/", "/nodes/",
    ],
)  # fmt: skip
def test_a_column_the_list_has_not_is_refused_naming_those_it_has(
    admin_client: Client, world: World, path: str
) -> None:
    response = admin_client.get(f"{path}?cols=name,price")
    assert response.status_code == 400
    text = response.content.decode().replace("&#x27;", "'")
    keys = ", ".join(c.key for c in LISTS[path.split("/")[1]].columns)
    assert f"cols: this list has no column 'price' (it has {keys})" in text


def test_a_hidden_column_is_not_read(admin_client: Client, world: World) -> None:
    def queries(query: str) -> list[str]:
        with CaptureQueriesContext(connection) as seen:
            assert admin_client.get(f"/reservations/?{query}").status_code == 200
        return [q["sql"] for q in seen.captured_queries]

    every, few = queries(""), queries("cols=name,state")
    # The VMs (VM column), the owners' clusters (Owner) and the cards' types (GPU; the
    # filter's choices of GPU type read the cards too, whatever is shown).
    for table in (
        'FROM "cloud_virtualmachine"',
        'FROM "clusters_cluster"',
        'FROM "gpus_gpuprofile"',
    ):
        assert sum(table in sql for sql in few) < sum(table in sql for sql in every), table


def test_the_vm_list_shows_the_columns_chosen(admin_client: Client, world: World) -> None:
    response = admin_client.get("/vms/?cols=status,name,per_hour")
    assert response.status_code == 200
    html = response.content.decode()
    assert headings(html, "vms") == ["VM", "Status", "Per hour", ""]
    assert "Cloudspace</th>" not in html
    assert 'name="cols" value="cloudspace">' in html


def test_the_cluster_list_shows_the_columns_chosen_and_reads_no_hidden_one(
    admin_client: Client, world: World
) -> None:
    with CaptureQueriesContext(connection) as every:
        admin_client.get("/clusters/")
    with CaptureQueriesContext(connection) as few:
        response = admin_client.get("/clusters/?failed=true&cols=name,failed")
    assert response.status_code == 200
    html = response.content.decode()
    assert headings(html, "clusters") == ["Cluster", "Failed"]
    assert f'href="/clusters/{world.cluster.pk}/#machines">1</a>' in html  # its failed machine
    # The filter is kept when the columns change.
    assert '<input type="hidden" name="failed" value="true">' in html
    # The pools, the GPUs held and the locations are read for their columns only.
    for table in (
        'FROM "clusters_machinepool"',
        'FROM "gpus_vgpureservation"',
        'FROM "clusters_clustersite"',
    ):
        seen = [q["sql"] for q in few.captured_queries if table in q["sql"].split("WHERE")[0]]
        assert not seen, table
        assert any(table in q["sql"].split("WHERE")[0] for q in every.captured_queries), table


def test_the_node_list_shows_the_columns_chosen_and_reads_no_hidden_one(
    admin_client: Client, kube: Kube
) -> None:
    with CaptureQueriesContext(connection) as every:
        whole = admin_client.get("/nodes/").content.decode()
    with CaptureQueriesContext(connection) as few:
        response = admin_client.get("/nodes/?cols=ready&cols=name")
    assert response.status_code == 200
    html = response.content.decode()
    assert headings(whole, "nodes") == [column.label for column in NODE_COLUMNS]
    assert headings(html, "nodes") == ["Node", "Ready"]
    row = re.search(rf'<tr id="node-{kube.unowned.pk}">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = [
        re.sub(r"<[^>]+>", " ", cell).split()
        for cell in re.findall(r"<td[^>]*>(.*?)</td>", row[1], re.S)
    ]
    assert cells == [["stray-node", kube.unowned.kubelet_version], ["not", "ready"]]
    assert "unowned node" in whole and "unowned node" not in html  # its flag, hidden
    assert 'name="cols" value="flags">' in html  # offered, not shown
    # The pods using GPUs (and the GPUs they request), the GPUs' verification, the
    # node's cluster and machine are read for their columns only.
    for table in (
        "clusters_kubepod",
        "kube_gpuverification",
        "clusters_cluster",
        "clusters_machine",
    ):
        seen = [q["sql"] for q in few.captured_queries if f'"{table}"' in q["sql"]]
        assert not any("clusters_kubenode" in sql for sql in seen), table
        assert any(
            f'"{table}"' in q["sql"] and "clusters_kubenode" in q["sql"]
            for q in every.captured_queries
        ), table


def test_the_cluster_page_shows_every_node_column_but_the_cluster(
    admin_client: Client, kube: Kube
) -> None:
    html = admin_client.get(f"/clusters/{kube.advertising.cluster_id}/").content.decode()
    assert headings(html, "nodes") == [c.label for c in NODE_COLUMNS if c.key != "cluster"]
    assert "unowned node" in html and "train-0" in html
