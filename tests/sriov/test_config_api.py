"""Enabling SR-IOV: admins only, a credential of its own required (never the account's),
write-only and never shown; agent tokens shown once; reads scoped by account."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.test import Client

from capvco_web.models import AuditEvent
from clusters.models import Cluster
from sriov.models import AgentToken, PodNic, SriovConfig
from tests.factories import ClusterFactory, MembershipFactory, UserFactory
from tests.sriov.support import NETWORK, World


def as_role(client: Client, world: World, role: str) -> Client:
    user = UserFactory()
    MembershipFactory(user=user, account=world.account, role=role)
    client.force_login(user)
    return client


def url(world: World, tail: str = "") -> str:
    return f"/api/v1/sriov/clusters/{world.cluster.pk}/{tail}"


@pytest.fixture
def fresh(world: World) -> World:
    """SR-IOV of the world's cluster off, without credential."""
    SriovConfig.objects.filter(cluster=world.cluster).update(enabled=False, credential="")
    return world


def put(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.put(path, body, content_type="application/json")


def post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, body, content_type="application/json")


def test_enabling_without_a_credential_is_refused_naming_it(fresh: World, client: Client) -> None:
    as_role(client, fresh, "admin")
    response = put(client, url(fresh), {"enabled": True, "external_network": NETWORK})
    assert response.status_code == 409  # none given and none kept
    assert "credential of its own" in response.json()["fields"]["credential"][0]
    assert not SriovConfig.objects.get(cluster=fresh.cluster).enabled


def test_enabling_with_a_blank_network_is_refused_naming_it(fresh: World, client: Client) -> None:
    as_role(client, fresh, "admin")
    body = {"enabled": True, "external_network": "  ", "credential": fresh.sim.token("z")}
    response = put(client, url(fresh), body)
    assert response.status_code == 400
    assert "external network" in response.json()["fields"]["external_network"][0]
    assert not SriovConfig.objects.get(cluster=fresh.cluster).enabled


def test_a_field_it_does_not_take_is_refused(fresh: World, client: Client) -> None:
    as_role(client, fresh, "admin")
    response = put(client, url(fresh), {"enabled": True, "credential_source": "x"})
    assert response.status_code == 400
    assert response.json()["fields"] == {"credential_source": ["Unknown field."]}
    assert not SriovConfig.objects.get(cluster=fresh.cluster).enabled


def test_the_accounts_own_credential_is_refused(fresh: World, client: Client) -> None:
    as_role(client, fresh, "admin")
    body = {"enabled": True, "external_network": NETWORK, "credential": fresh.account.credential}
    response = put(client, url(fresh), body)
    assert response.status_code == 400
    assert "account's own credential" in response.json()["fields"]["credential"][0]


def test_enabling_without_a_kubeconfig_is_refused(fresh: World, client: Client) -> None:
    Cluster.objects.filter(pk=fresh.cluster.pk).update(kubeconfig="")
    as_role(client, fresh, "admin")
    body = {"enabled": True, "external_network": NETWORK, "credential": fresh.sim.token("x")}
    response = put(client, url(fresh), body)
    assert response.status_code == 409  # the cluster's state: the same change works later
    assert "kubeconfig" in response.json()["fields"]["enabled"][0]


def test_an_admin_enables_it_and_the_credential_is_never_shown(
    fresh: World, client: Client
) -> None:
    as_role(client, fresh, "admin")
    secret = fresh.sim.token("sriov-2")
    body = {"enabled": True, "external_network": NETWORK, "credential": secret, "reason": "go"}
    response = put(client, url(fresh), body)
    assert response.status_code == 200, response.content
    shown = response.json()
    assert shown["enabled"] and shown["has_credential"]
    assert secret not in response.content.decode()
    assert secret not in client.get(url(fresh)).content.decode()
    assert SriovConfig.objects.get(cluster=fresh.cluster).credential == secret
    event = AuditEvent.objects.filter(action="sriov.config_set").latest("pk")
    assert secret not in str(event.before) + str(event.after)
    assert event.after["credential"] == "(secret, changed)"


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_enable_it_or_rotate_tokens(fresh: World, client: Client, role: str) -> None:
    as_role(client, fresh, role)
    body = {"enabled": True, "external_network": NETWORK, "credential": fresh.sim.token("y")}
    assert put(client, url(fresh), body).status_code == 403
    assert post(client, url(fresh, "agent-token/"), {}).status_code == 403
    assert client.get(url(fresh)).status_code == 200  # they read it


def test_a_rotated_token_is_shown_once_with_its_manifests(world: World, client: Client) -> None:
    as_role(client, world, "admin")
    made = post(client, url(world, "agent-token/"), {"reason": "rotate"})
    assert made.status_code == 201
    token = made.json()["token"]
    assert token.startswith("cvsriov_")
    assert token in made.json()["manifests"]
    assert AgentToken.objects.filter(cluster=world.cluster).count() == 1
    assert token not in client.get(url(world)).content.decode()
    manifests = client.get(url(world, "manifests/"))
    assert manifests.status_code == 200
    text = manifests.content.decode()
    assert token not in text and "REPLACE-WITH-THE-AGENT-TOKEN" in text
    assert "kind: DaemonSet" in text and "NetworkAttachmentDefinition" in text
    assert AuditEvent.objects.filter(action="sriov.agent_token_rotate").exists()


def test_nics_and_queues_are_seen_only_within_ones_accounts(world: World, client: Client) -> None:
    world.pod("web")
    world.add("web")
    as_role(client, world, "viewer")
    nics = client.get("/api/v1/sriov/nics/").json()["results"]
    assert [n["pod_name"] for n in nics] == ["web"]
    assert client.get("/api/v1/sriov/queues/").status_code == 200
    use = client.get("/api/v1/sriov/external-networks/address-use/")
    assert use.status_code == 200
    outsider = UserFactory()
    MembershipFactory(user=outsider, account=ClusterFactory().account, role="admin")
    client.force_login(outsider)
    assert client.get("/api/v1/sriov/nics/").json()["results"] == []
    nic = PodNic.objects.get()
    assert client.get(f"/api/v1/sriov/nics/{nic.pk}/").status_code == 404
    assert client.get(url(world)).status_code == 404


def test_with_the_addon_on_a_new_token_is_applied_to_the_cluster(
    world: World, client: Client
) -> None:
    import requests

    world.kube.register(
        "demo",
        group="k8s.cni.cncf.io",
        version="v1",
        plural="network-attachment-definitions",
        kind="NetworkAttachmentDefinition",
        namespaced=True,
    )
    as_role(client, world, "admin")
    assert put(client, url(world), {"install_node_side": True}).json()["install_node_side"]
    for _ in range(2):  # made, then replaced
        made = post(client, url(world, "agent-token/"), {"reason": "install"})
        assert made.status_code == 201
        assert (made.json()["applied"], made.json()["apply_error"]) == (True, "")
    headers = {"Authorization": f"Bearer {world.kube_token}"}
    secret = requests.get(
        f"{world.kube_server}/api/v1/namespaces/kube-system/secrets/capvco-sriov-agent",
        headers=headers,
        timeout=5,
        verify=world.kube_cluster.ca_file,
    ).json()
    # As a real API server answers a Secret: `data` in base64, `stringData` never returned.
    assert base64.b64decode(secret["data"]["token"]).decode() == made.json()["token"]
    assert "stringData" not in secret
    daemonset = requests.get(
        f"{world.kube_server}/apis/apps/v1/namespaces/kube-system/daemonsets/"
        "capvco-sriov-installer",
        headers=headers,
        timeout=5,
        verify=world.kube_cluster.ca_file,
    )
    assert daemonset.status_code == 200
    event = AuditEvent.objects.filter(action="sriov.node_side_apply").latest("pk")
    assert event.after["applied"] is True
    assert made.json()["token"] not in str(event.after)


def test_an_apply_that_fails_says_so_and_the_token_is_still_made(
    world: World, client: Client
) -> None:
    as_role(client, world, "admin")
    put(client, url(world), {"install_node_side": True})
    world.kube.fault(operation="*", status=403)
    made = post(client, url(world, "agent-token/"), {"reason": "install"})
    assert made.status_code == 201
    assert made.json()["applied"] is False
    assert "403" in made.json()["apply_error"] or "orbidden" in made.json()["apply_error"]
    assert made.json()["token"] in made.json()["manifests"]
