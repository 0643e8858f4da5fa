"""Kubernetes on the dashboard: a cluster's nodes (GPU type label, allocatable and requested
GPUs, the pods using them, Ready, machine, flags), how well it was observed and its GPU
add-on; the node list behind each flag; GPUs allocatable in Kubernetes next to those
attached in whitesky on the capacity board; each read by role per account."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from html import unescape

import pytest
from django.test import Client
from django.utils import timezone

from clusters.models import Cluster, Machine
from kube.models import KubeNode
from tests.dashboard.conftest import Kube, World
from tests.factories import (
    AccountFactory,
    ClusterFactory,
    ClusterSiteFactory,
    KubeNodeFactory,
    KubePodFactory,
    LocationFactory,
    MachineFactory,
    MachineNodeFactory,
    MachinePoolFactory,
    MembershipFactory,
    gpu_addon_held,
    kube_observed_as,
)

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def _cluster_page(client: Client, world: World, htmx: bool, query: str = "") -> str:
    headers = {**HTMX, "HTTP_HX_TARGET": "cluster-body"} if htmx else {}
    response = client.get(f"/clusters/{world.cluster.pk}/{query}", **headers)  # type: ignore[arg-type]
    assert response.status_code == 200
    assert ("<html" in response.content.decode()) is not htmx
    return response.content.decode()


def _row(html: str, row_id: str) -> str:
    start = html.index(f'id="{row_id}"')
    return html[start : html.index("</tr>", start)]


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "fragment"])
def test_the_cluster_page_shows_each_node_with_its_gpus_pods_machine_and_flags(
    admin_client: Client, world: World, kube: Kube, htmx: bool
) -> None:
    html = _cluster_page(admin_client, world, htmx)

    advertising = _row(html, f"node-{kube.advertising.pk}")
    assert "nvidia-a100 \u00d7 1" in advertising  # type, times count
    assert "ml/train-0" in advertising  # the pod holding its GPU; not web-0 nor done-0
    assert "web-0" not in advertising and "done-0" not in advertising
    assert f'href="/clusters/{world.cluster.pk}/#machine-{world.machines[0].pk}"' in advertising
    assert "Ready" in advertising and "badge" not in advertising
    silent = _row(html, f"node-{kube.silent.pk}")
    assert "no GPUs advertised" in silent
    assert "No nvidia.com/gpu advertised 10 minutes after it joined" in silent
    unowned = _row(html, f"node-{kube.unowned.pk}")
    assert "unowned node" in unowned and "not ready" in unowned
    control_plane = _row(html, f"node-{kube.control_plane.pk}")
    assert "control plane" in control_plane and "unowned" not in control_plane
    never_joined = _row(html, f"machine-{kube.never_joined.pk}")
    assert "never joined" in never_joined and "capvco-prod-edge-0" in never_joined


def test_the_node_rows_count_what_pods_request_and_what_nodes_advertise(
    admin_client: Client, world: World, kube: Kube
) -> None:
    rows = admin_client.get(f"/clusters/{world.cluster.pk}/").context["node_rows"]

    shown = {
        r.node.name: (r.node.gpu_allocatable, r.node.gpu_requested, [p.name for p in r.gpu_pods])
        for r in rows
    }
    assert shown == {
        "capvco-prod-gpu-0": (1, 1, ["train-0"]),
        "capvco-prod-gpu-1": (0, 0, []),
        "cp-0": (0, 0, []),
        "stray-node": (0, 0, []),
    }  # by name


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "fragment"])
def test_the_cluster_page_shows_its_kubernetes_observation_and_gpu_addon(
    admin_client: Client, world: World, kube: Kube, htmx: bool
) -> None:
    section = _cluster_page(admin_client, world, htmx).split('id="kubernetes"')[1]
    assert "complete" in section and "stale" not in section
    assert "the NVIDIA device plugin is applied" in section
    assert "4</a>, 3 Ready" in section  # all but the stray node
    flags = unescape(section)
    for flag in ("node-missing", "gpus-missing", "unowned"):
        assert f"/nodes/?cluster={world.cluster.pk}&flag={flag}" in flags

    kube_observed_as(
        world.cluster,
        complete=False,
        error="node listing failed: 503 Service Unavailable",
        last_complete_at=timezone.now() - timedelta(hours=1),
    )
    gpu_addon_held(
        world.cluster,
        applied_at=None,
        error="A DaemonSet kube-system/capvco-nvidia-device-plugin exists that we did not make",
    )
    section = _cluster_page(admin_client, world, htmx).split('id="kubernetes"')[1]
    assert "node listing failed: 503 Service Unavailable" in section
    assert "stale" in section
    assert "not applied" in section and "that we did not make" in section


def test_a_cluster_without_a_kubeconfig_says_it_is_not_observed(
    admin_client: Client, world: World
) -> None:
    html = _cluster_page(admin_client, world, htmx=False)
    assert "no kubeconfig, so its nodes and pods are not observed" in html
    assert admin_client.get(f"/clusters/{world.cluster.pk}/").context["node_rows"] == []


def test_the_node_table_pages_by_name(admin_client: Client, world: World) -> None:
    KubeNode.objects.bulk_create(
        KubeNode(
            cluster=world.cluster,
            name=f"node-{i:03}",
            uid=f"uid-{i}",
            first_seen_at=timezone.now(),
            updated_at=timezone.now(),
        )
        for i in range(120)
    )
    path = f"/clusters/{world.cluster.pk}/"

    def names(response: object) -> list[str]:
        return [r.node.name for r in response.context["node_rows"]]  # type: ignore[attr-defined]

    first = admin_client.get(path)
    links = first.context["node_links"]
    second = admin_client.get(links["next"].split("#")[0])
    last = admin_client.get(links["last"].split("#")[0])
    assert names(first) == [f"node-{i:03}" for i in range(50)]
    assert names(second) == [f"node-{i:03}" for i in range(50, 100)]
    assert names(last) == [f"node-{i:03}" for i in range(70, 120)]  # the last 50
    assert "first" not in links
    back = admin_client.get(second.context["node_links"]["previous"].split("#")[0])
    assert names(back) == names(first)
    # The machines' page number is kept beside the nodes' cursor.
    assert "page=1" in admin_client.get(f"{path}?page=1").context["node_links"]["next"]

    bad = admin_client.get(f"{path}?nodes_after=not-ours")
    assert bad.status_code == 200  # the rest of the page stands
    assert "start again from the first page" in bad.context["node_error"]
    assert names(bad) == names(first)


# --- the node list ------------------------------------------------------------------------


def _listed(client: Client, query: str, **headers: str) -> list[str]:
    response = client.get(f"/nodes/{query}", **headers)  # type: ignore[arg-type]
    assert response.status_code == 200, response.content[:500]
    rows = response.context["rows"] or response.context["machines"]
    return [getattr(r, "node", r).name for r in rows]


def test_the_node_list_filters_by_cluster_flag_location_and_type(
    admin_client: Client, world: World, kube: Kube
) -> None:
    other = KubeNodeFactory(cluster=ClusterFactory(name="other"), name="other-node")

    everything = ["capvco-prod-gpu-0", "capvco-prod-gpu-1", "cp-0", other.name, "stray-node"]
    assert _listed(admin_client, "") == everything
    # The form sends its "any" choices as empty values: no filter.
    assert _listed(admin_client, "?cluster=&location=&gpu_type=&flag=") == everything
    assert other.name not in _listed(admin_client, "?cluster__name=prod")
    assert other.name not in _listed(admin_client, f"?cluster={world.cluster.pk}")
    assert _listed(admin_client, "?flag=gpus-missing") == ["capvco-prod-gpu-1"]
    assert _listed(admin_client, "?flag=unowned") == ["stray-node"]
    assert _listed(admin_client, "?flag=node-missing") == ["edge-0"]
    assert _listed(admin_client, "?flag=node-missing&cluster__name=other") == []
    assert _listed(admin_client, f"?location={world.fresh.pk}&gpu_type=nvidia-a100") == [
        "capvco-prod-gpu-0", "capvco-prod-gpu-1",
    ]  # fmt: skip
    assert _listed(admin_client, f"?location={world.stale.pk}") == []


def test_the_node_list_answers_htmx_with_its_table_alone(
    admin_client: Client, world: World, kube: Kube
) -> None:
    response = admin_client.get("/nodes/?flag=unowned", **{**HTMX, "HTTP_HX_TARGET": "node-table"})  # type: ignore[arg-type]
    body = response.content.decode()
    assert response.status_code == 200 and "HX-Request" in response["Vary"]
    assert "<html" not in body and 'id="node-table"' in body
    assert "stray-node" in body and "capvco-prod-gpu-0" not in body
    machines = admin_client.get(
        "/nodes/?flag=node-missing", **{**HTMX, "HTTP_HX_TARGET": "node-table"}
    )  # type: ignore[arg-type]
    assert "edge-0" in machines.content.decode()
    assert "never joined" in machines.content.decode()


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("?flag=broken", "flag: Select a valid choice. broken is not one of the available"),
        ("?cluster=nowhere", "cluster: Select a valid choice."),
        ("?flag=node-missing&gpu_type=nvidia-a100", "Machines with no node carry no node label"),
        ("?after=not-a-cursor", "This page link is not valid"),
        ("?clustr=prod", "clustr: not a filter of this list (it takes "),
        ("?flag=unowned&flag=node-missing", "flag: Give this parameter once."),
    ],
)
def test_bad_filters_are_refused_saying_why(
    admin_client: Client, world: World, query: str, problem: str
) -> None:
    response = admin_client.get(f"/nodes/{query}")
    assert response.status_code == 400
    assert any(problem in error for error in response.context["errors"]), response.context["errors"]


def test_the_node_list_by_a_cluster_name_that_two_accounts_use_lists_both(
    admin_client: Client, world: World, kube: Kube
) -> None:
    twin = ClusterFactory(account=AccountFactory(name="other-account"), name="prod")
    KubeNodeFactory(cluster=twin, name="twin-node")
    MachineNodeFactory(
        machine=MachineFactory(
            pool=MachinePoolFactory(site=ClusterSiteFactory(cluster=twin), name="edge"),
            index=0,
            name="twin-edge-0",
        )
    )

    assert _listed(admin_client, "?cluster__name=prod") == [
        "capvco-prod-gpu-0", "capvco-prod-gpu-1", "cp-0", "stray-node", "twin-node",
    ]  # fmt: skip
    assert _listed(admin_client, "?cluster__name=prod&flag=node-missing") == [
        "edge-0", "twin-edge-0",
    ]  # fmt: skip
    assert _listed(admin_client, f"?cluster={twin.pk}&flag=node-missing") == ["twin-edge-0"]


# --- the overview -------------------------------------------------------------------------


def test_the_capacity_board_shows_gpus_allocatable_in_kubernetes_next_to_whitesky(
    admin_client: Client, world: World, kube: Kube
) -> None:
    # An H100 node in the fresh location: a type no card there is listed as.
    h100 = MachinePoolFactory(site=world.pool.site, name="h100", gpu_type="H100", gpu_count=2)
    KubeNodeFactory(
        cluster=world.cluster,
        name="h100-node",
        machine=MachineFactory(pool=h100, index=0, phase=Machine.Phase.RUNNING),
        labels={"capvco.io/gpu-type": "nvidia-h100"},
        gpu_capacity=2,
        gpu_allocatable=2,
    )
    response = admin_client.get("/")
    board = {(r.location.name, r.gpu_type): r for r in response.context["board"]}

    a100 = board["nl-fresh-dc01", "NVIDIA A100"]
    # Attached in whitesky: both machines' vGPUs; Kubernetes: gpu-0's node advertises its
    # GPU, gpu-1's node none.
    assert (a100.attached, a100.kube_allocatable) == (2, 1)
    h100_row = board["nl-fresh-dc01", "nvidia-h100"]
    assert (h100_row.cards, h100_row.kube_allocatable) == (0, 2)
    assert board["be-stale-dc02", "NVIDIA T4"].kube_allocatable == 0
    html = unescape(response.content.decode())
    link = f"/nodes/?location={world.fresh.pk}&gpu_type=nvidia-a100"
    assert link in html
    assert _listed(admin_client, link.removeprefix("/nodes/")) == [
        "capvco-prod-gpu-0", "capvco-prod-gpu-1",
    ]  # fmt: skip


def test_the_overview_counts_each_flag_and_links_to_its_list(
    admin_client: Client, world: World, kube: Kube
) -> None:
    response = admin_client.get("/")
    flags = response.context["kube_flags"]
    assert (flags.machines_node_missing, flags.nodes_gpus_missing, flags.nodes_unowned) == (
        1, 1, 1,
    )  # fmt: skip
    html = response.content.decode()
    for flag, listed in [
        ("node-missing", ["edge-0"]),
        ("gpus-missing", ["capvco-prod-gpu-1"]),
        ("unowned", ["stray-node"]),
    ]:
        figure = html.split(f'id="flag-{flag}"')[1].split("</div>")[0]
        assert f'href="/nodes/?flag={flag}">1</a>' in figure
        assert _listed(admin_client, f"?flag={flag}") == listed


# --- who sees what ------------------------------------------------------------------------


@pytest.fixture
def theirs(world: World) -> Cluster:
    """Another account's cluster with a node of each flag and a machine with no node."""
    account = AccountFactory(name="globex")
    location = LocationFactory(account=account, name="de-other-dc01")
    cluster = ClusterFactory(account=account, name="theirs")
    pool = MachinePoolFactory(
        site=ClusterSiteFactory(cluster=cluster, location=location), name="gpu", gpus=True
    )
    machine = MachineFactory(pool=pool, index=0, phase=Machine.Phase.RUNNING, vm_id=9000)
    MachineNodeFactory(machine=MachineFactory(pool=pool, index=1, phase=Machine.Phase.RUNNING))
    node = KubeNodeFactory(
        cluster=cluster,
        name="their-gpu-node",
        machine=machine,
        labels={"capvco.io/gpu-type": "nvidia-a100"},
        gpu_allocatable=0,
        gpus_missing=True,
    )
    KubeNodeFactory(cluster=cluster, name="their-stray", unowned_since=timezone.now())
    KubePodFactory(cluster=cluster, name="their-pod", node_name=node.name)
    return cluster


def test_a_viewer_of_one_account_sees_none_of_another_accounts_nodes(
    member: Callable[[str], Client], world: World, kube: Kube, theirs: Cluster
) -> None:
    viewer = member("viewer")

    assert _listed(viewer, "") == ["capvco-prod-gpu-0", "capvco-prod-gpu-1", "cp-0", "stray-node"]
    assert _listed(viewer, "?flag=gpus-missing") == ["capvco-prod-gpu-1"]
    assert _listed(viewer, "?flag=unowned") == ["stray-node"]
    assert _listed(viewer, "?flag=node-missing") == ["edge-0"]
    page = viewer.get("/nodes/").content.decode()
    assert "their-" not in page and "theirs" not in page  # nor among the filter's choices
    assert viewer.get(f"/nodes/?cluster={theirs.pk}").status_code == 400  # not one of theirs
    overview = viewer.get("/")
    flags = overview.context["kube_flags"]
    assert (flags.machines_node_missing, flags.nodes_gpus_missing, flags.nodes_unowned) == (
        1, 1, 1,
    )  # fmt: skip
    assert {r.location.name for r in overview.context["board"]} == {
        world.fresh.name, world.stale.name,
    }  # fmt: skip
    assert viewer.get(f"/clusters/{theirs.pk}/").status_code == 404


def test_a_member_of_both_accounts_and_a_superuser_see_both(
    admin_client: Client, client: Client, world: World, kube: Kube, theirs: Cluster
) -> None:
    user = MembershipFactory(account=world.cluster.account, role="viewer").user
    MembershipFactory(account=theirs.account, role="viewer", user=user)
    client.force_login(user)
    for seeing in (client, admin_client):
        assert _listed(seeing, "?flag=unowned") == ["stray-node", "their-stray"]
        assert _listed(seeing, "?flag=node-missing") == ["edge-0", "gpu-1"]
        flags = seeing.get("/").context["kube_flags"]
        assert flags.nodes_gpus_missing == 2
