"""Kubeconfigs are write-only, stored encrypted, audited without their secret, and refused
when they skip TLS verification unless the account's admin allows it; mirrored nodes and
pods are read-only in the API and the admin."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from capvco_web.integrations.kube import KubeconfigInvalid
from capvco_web.models import AuditEvent
from cloud.models import Account
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from kube.client import kube_client
from kube.models import KubeNode, KubePod, MachineNode
from kube.observe import kubeconfig_sha256
from kube.tasks import observe_kube_all
from tests.clusters.test_admin import cluster_page_data
from tests.factories import (
    KubeNodeFactory,
    KubePodFactory,
    MachineNodeFactory,
    MembershipFactory,
    kube_observed_as,
)
from tests.kube.test_kube_reach import TOKEN, kubeconfig

pytestmark = pytest.mark.django_db

KUBECONFIG = kubeconfig("https://api.prod.example:6443")
EXEC_KUBECONFIG = KUBECONFIG.replace(
    f"user: {{token: {TOKEN}}}", "user: {exec: {command: /bin/sh, args: [-c, id]}}"
)


def stored_kubeconfig(cluster_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT kubeconfig FROM clusters_cluster WHERE id = %s", [cluster_id])
        return str(cursor.fetchone()[0])


def audited(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action))


def mirror(cluster: Cluster, machine: Machine | None = None) -> None:
    node = KubeNodeFactory(cluster=cluster, name="capvco-prod-gpu-0", machine=machine)
    KubePodFactory(cluster=cluster, name="job-a", node_name=node.name, labels={"team": "ml"})
    KubePodFactory(cluster=cluster, name="job-b", node_name="")


def test_a_cluster_created_with_a_kubeconfig_never_shows_it_and_stores_it_encrypted(
    api: APIClient, site: ClusterSite
) -> None:
    body = {"name": "edge", "account": site.cluster.account_id, "kubeconfig": KUBECONFIG}
    response = api.post("/api/v1/clusters/", body, format="json")

    assert response.status_code == 201, response.json()
    assert "kubeconfig" not in response.json() and TOKEN not in response.content.decode()
    assert response.json()["has_kubeconfig"] is True
    cluster = Cluster.objects.get(name="edge")
    assert cluster.kubeconfig.strip() == KUBECONFIG.strip()
    assert TOKEN not in stored_kubeconfig(cluster.pk)
    (event,) = audited("cluster.kubeconfig_set")
    assert event.after == {"server": "https://api.prod.example:6443"}
    assert event.actor_name == "ops"
    assert TOKEN not in str(event.before) + str(event.after)
    assert TOKEN not in api.get(f"/api/v1/clusters/{cluster.pk}/").content.decode()


@pytest.mark.parametrize(
    ("kubeconfig", "problem"),
    [
        (EXEC_KUBECONFIG, "User 'observer' authenticates with exec"),
        (KUBECONFIG.replace("current-context: prod", "current-context: nope"), "context 'nope'"),
        (KUBECONFIG.replace("token: ", "tokenFile: "), "reads a file of the control plane"),
        ("{not yaml", "not valid YAML"),
    ],
    ids=["exec", "unknown-context", "token-file", "not-yaml"],
)
def test_a_kubeconfig_that_cannot_be_used_is_refused_naming_the_problem(
    api: APIClient, site: ClusterSite, kubeconfig: str, problem: str
) -> None:
    body = {"name": "edge", "account": site.cluster.account_id, "kubeconfig": kubeconfig}
    response = api.post("/api/v1/clusters/", body, format="json")

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["kubeconfig"]
    assert problem in response.json()["fields"]["kubeconfig"][0]
    assert not Cluster.objects.filter(name="edge").exists()


def test_replacing_a_kubeconfig_is_audited_and_compares_the_mirror_afresh(
    api: APIClient, site: ClusterSite
) -> None:
    cluster = site.cluster
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=KUBECONFIG)
    listed = kube_observed_as(
        cluster,
        nodes_resource_version="41",
        pods_resource_version="41",
        kubeconfig_sha256=kubeconfig_sha256(KUBECONFIG),
    )
    other = KUBECONFIG.replace("api.prod.example", "api.other.example")
    url = f"/api/v1/clusters/{cluster.pk}/kubeconfig/"

    refused = api.put(url, {"kubeconfig": EXEC_KUBECONFIG}, format="json")
    replaced = api.put(url, {"kubeconfig": other, "reason": "moved"}, format="json")

    assert refused.status_code == 400 and "exec" in refused.json()["fields"]["kubeconfig"][0]
    assert replaced.status_code == 204
    cluster.refresh_from_db()
    assert "api.other.example" in cluster.kubeconfig
    # The versions mirrored are of the old kubeconfig's listings: the observer lists and
    # compares afresh (tests/kube/test_kube_observe.py).
    assert listed.kubeconfig_sha256 != kubeconfig_sha256(cluster.kubeconfig)
    (event,) = audited("cluster.kubeconfig_set")
    assert (event.before, event.after, event.reason) == (
        {"server": "https://api.prod.example:6443"},
        {"server": "https://api.other.example:6443"},
        "moved",
    )


def test_removing_the_kubeconfig_drops_the_mirror_and_its_flags_at_the_next_tick(
    api: APIClient, pool: MachinePool
) -> None:
    cluster = pool.cluster
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=KUBECONFIG)
    mirror(cluster)
    MachineNodeFactory(machine=Machine.objects.get(name="gpu-1"), missing_reason="x")

    response = api.delete(f"/api/v1/clusters/{cluster.pk}/kubeconfig/", {}, format="json")
    assert response.status_code == 204
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig == ""
    observe_kube_all()  # the next tick: the mirror's own writer drops it
    observe_kube_all()  # and a second one finds nothing more to drop

    assert not KubeNode.objects.exists() and not KubePod.objects.exists()
    assert not MachineNode.objects.exists()
    assert len(audited("cluster.kubeconfig_remove")) == 1


def test_nodes_and_pods_are_read_only_and_filtered_by_cluster(
    api: APIClient, pool: MachinePool
) -> None:
    machine = Machine.objects.get(name="gpu-0")
    mirror(pool.cluster, machine)
    KubeNodeFactory(cluster__account=pool.cluster.account)  # of another cluster

    nodes = api.get("/api/v1/nodes/", {"cluster__name": "prod"}).json()["results"]
    assert api.get("/api/v1/nodes/", {"cluster": pool.cluster_id}).json()["results"] == nodes
    pods = api.get("/api/v1/pods/", {"cluster__name": "prod", "node_name": "capvco-prod-gpu-0"})
    created = api.post("/api/v1/nodes/", {"name": "x"}, format="json")

    assert [(n["name"], n["machine"], n["gpu_allocatable"]) for n in nodes] == [
        ("capvco-prod-gpu-0", machine.pk, 1)
    ]
    assert [p["name"] for p in pods.json()["results"]] == ["job-a"]
    assert "gpu_type" in pods.json()["results"][0]  # what its nodeSelector asks for
    assert pods.json()["results"][0]["labels"] == {"team": "ml"}
    assert created.status_code == 405
    assert api.get("/api/v1/nodes/", {"unowned": "true"}).json()["count"] == 0


def test_machines_show_whether_their_node_is_missing(api: APIClient, pool: MachinePool) -> None:
    MachineNodeFactory(machine=Machine.objects.get(name="gpu-1"), missing_reason="Never")

    machines = {m["name"]: m for m in api.get("/api/v1/machines/").json()["results"]}

    assert (machines["gpu-1"]["node_missing"], machines["gpu-1"]["node_missing_reason"]) == (
        True, "Never",
    )  # fmt: skip
    # Never seen by the observer: not flagged, as before the flags had their own row.
    never = machines["gpu-0"]
    assert (never["node_missing"], never["node_missing_reason"], never["node_joined_at"]) == (
        False, "", None,
    )  # fmt: skip


def test_the_admin_sets_a_kubeconfig_without_ever_showing_it(
    admin_client: Client, site: ClusterSite
) -> None:
    cluster = site.cluster
    url, data = cluster_page_data(admin_client, cluster)
    data.update({"name": cluster.name, "account": cluster.account_id})

    refused = admin_client.post(url, {**data, "new_kubeconfig": EXEC_KUBECONFIG})
    saved = admin_client.post(url, {**data, "new_kubeconfig": KUBECONFIG})
    page = admin_client.get(url).content.decode()

    assert refused.status_code == 200 and "authenticates with exec" in refused.content.decode()
    assert saved.status_code == 302
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig.strip() == KUBECONFIG.strip()
    assert TOKEN not in page
    assert "stored, server https://api.prod.example:6443" in page
    assert len(audited("cluster.kubeconfig_set")) == 1

    removed = admin_client.post(url, {**data, "remove_kubeconfig": "on"})
    assert removed.status_code == 302
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig == ""
    assert len(audited("cluster.kubeconfig_remove")) == 1


def test_mirrored_nodes_cannot_be_changed_in_the_admin(
    admin_client: Client, pool: MachinePool
) -> None:
    mirror(pool.cluster)
    node = KubeNode.objects.get()
    listing = admin_client.get(reverse("admin:kube_kubenode_changelist"))
    change = admin_client.post(
        reverse("admin:kube_kubenode_change", args=[node.pk]), {"name": "renamed"}
    )

    assert listing.status_code == 200 and node.name in listing.content.decode()
    assert change.status_code == 403
    assert KubeNode.objects.get().name == node.name


INSECURE_KUBECONFIG = kubeconfig(
    "https://api.prod.example:6443", cluster=", insecure-skip-tls-verify: true"
)


def test_a_kubeconfig_that_skips_tls_verification_is_refused_unless_the_account_allows_it(
    api: APIClient, site: ClusterSite, client: Client, api_user: Any
) -> None:
    cluster, account = site.cluster, site.cluster.account
    url = f"/api/v1/clusters/{cluster.pk}/kubeconfig/"

    refused = api.put(url, {"kubeconfig": INSECURE_KUBECONFIG}, format="json")
    management = api.put(
        f"/api/v1/accounts/{account.pk}/capi-kubeconfig/",
        {"kubeconfig": INSECURE_KUBECONFIG},
        format="json",
    )

    assert refused.status_code == 400 and management.status_code == 400
    assert "insecure-skip-tls-verify" in refused.json()["fields"]["kubeconfig"][0]
    assert "insecure-skip-tls-verify" in management.json()["fields"]["kubeconfig"][0]
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig == ""

    allowed = api.patch(
        f"/api/v1/accounts/{account.pk}/", {"kube_insecure_tls_allowed": True}, format="json"
    )
    assert allowed.status_code == 200 and allowed.json()["kube_insecure_tls_allowed"] is True
    (event,) = audited("account.update")
    assert event.before == {"kube_insecure_tls_allowed": False}
    assert event.after == {"kube_insecure_tls_allowed": True}

    assert api.put(url, {"kubeconfig": INSECURE_KUBECONFIG}, format="json").status_code == 204
    client.force_login(api_user)
    page = client.get(f"/clusters/{cluster.pk}/").content.decode()
    assert 'id="kube-tls-insecure"' in page and "TLS not verified" in page

    # Allowed no more: the one stored is not used either.
    Account.objects.filter(pk=account.pk).update(kube_insecure_tls_allowed=False)
    with pytest.raises(KubeconfigInvalid, match="insecure-skip-tls-verify"):
        kube_client(Cluster.objects.get(pk=cluster.pk))


def test_only_an_accounts_admin_allows_insecure_tls(site: ClusterSite) -> None:
    account = site.cluster.account
    operator = APIClient()
    operator.force_authenticate(MembershipFactory(account=account, role="operator").user)

    response = operator.patch(
        f"/api/v1/accounts/{account.pk}/", {"kube_insecure_tls_allowed": True}, format="json"
    )

    assert response.status_code == 403
    assert Account.objects.get(pk=account.pk).kube_insecure_tls_allowed is False


def test_the_admin_refuses_an_insecure_kubeconfig_until_the_account_allows_it(
    admin_client: Client, site: ClusterSite
) -> None:
    cluster = site.cluster
    url, data = cluster_page_data(admin_client, cluster)
    data.update({"name": cluster.name, "account": cluster.account_id})

    refused = admin_client.post(url, {**data, "new_kubeconfig": INSECURE_KUBECONFIG})
    Account.objects.filter(pk=cluster.account_id).update(kube_insecure_tls_allowed=True)
    saved = admin_client.post(url, {**data, "new_kubeconfig": INSECURE_KUBECONFIG})

    assert refused.status_code == 200
    assert "insecure-skip-tls-verify: true" in refused.content.decode()
    assert saved.status_code == 302
    page = admin_client.get(url).content.decode()
    assert "(insecure: its TLS certificate is not verified)" in page
