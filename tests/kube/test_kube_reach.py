"""A kubeconfig's server must be one KUBE_ALLOWED_HOSTS allows, at every entry point (API,
admin, stored ones when used); what an API server answers reaches viewers only as its
Kubernetes Status message; YAML is bounded as JSON is; every value has its type."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from cloud.models import Account
from clusters.models import Cluster, ClusterSite
from kube.tasks import observe_cluster_kube
from tests.factories import MembershipFactory, kube_observation_of
from tests.http_stub import HttpStub, Reply

pytestmark = pytest.mark.django_db

SECRET = "redis_password=hunter2-internal"
TOKEN = "s3cret-service-account-token"


def kubeconfig(server: str, *, cluster: str = "", user: str = "") -> str:
    return f"""
apiVersion: v1
kind: Config
current-context: prod
contexts:
- name: prod
  context: {{cluster: prod, user: observer}}
clusters:
- name: prod
  cluster: {{server: "{server}"{cluster}}}
users:
- name: observer
  user: {{token: {TOKEN}{user}}}
"""


DEEP = kubeconfig("https://api.prod.example:6443").replace(
    "kind: Config", "kind: Config\nx: " + "[" * 400 + "]" * 400
)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port where an internal service would listen; accepts nothing by itself."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def contacted(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def origin(sock: socket.socket, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{sock.getsockname()[1]}"


def viewer_of(account: Account) -> Client:
    client = Client()
    client.force_login(MembershipFactory(account=account, role="viewer").user)
    return client


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (kubeconfig("https://internal.example:6443"), "internal.example is not in KUBE_ALLOWED"),
        (kubeconfig("http://127.0.0.1:6379"), "http://127.0.0.1:6379 is not in KUBE_ALLOWED"),
        (kubeconfig("https://169.254.169.254"), "169.254.169.254 is not in KUBE_ALLOWED_HOSTS"),
        (
            kubeconfig("https://api.prod.example:6443", cluster=', proxy-url: "http://10.0.0.1"'),
            "names a proxy-url",
        ),
        (DEEP, "deeper than 32 levels"),
        (kubeconfig("https://api.prod.example:6443", user=", username: {a: 1}"), "username must"),
        (
            kubeconfig("https://api.prod.example:6443", cluster=", tls-server-name: {a: b}"),
            "tls-server-name must be text, not a mapping",
        ),
    ],
    ids=["not-listed", "plain-http", "metadata", "proxy-url", "deep", "username", "tls-name"],
)
def test_every_api_entry_refuses_what_may_not_be_used_naming_the_field(
    api: APIClient, site: ClusterSite, text: str, problem: str
) -> None:
    account = site.cluster.account
    created = api.post(
        "/api/v1/clusters/",
        {"name": "edge", "account": account.pk, "kubeconfig": text},
        format="json",
    )
    put = api.put(f"/api/v1/clusters/{site.cluster_id}/kubeconfig/", {"kubeconfig": text})
    management = api.put(f"/api/v1/accounts/{account.pk}/capi-kubeconfig/", {"kubeconfig": text})

    for response in (created, put, management):
        assert response.status_code == 400, response.content
        assert list(response.json()["fields"]) == ["kubeconfig"]
        assert problem in response.json()["fields"]["kubeconfig"][0]
    assert not Cluster.objects.filter(name="edge").exists()
    assert Cluster.objects.get(pk=site.cluster_id).kubeconfig == ""
    assert Account.objects.get(pk=account.pk).capi_kubeconfig == ""


def test_the_admin_refuses_a_server_outside_the_allow_list(
    admin_client: Client, site: ClusterSite
) -> None:
    from tests.clusters.test_admin import cluster_page_data

    url, data = cluster_page_data(admin_client, site.cluster)
    text = kubeconfig("https://internal.example:6443")

    posted = admin_client.post(url, {**data, "new_kubeconfig": text})

    assert posted.status_code == 200
    assert "internal.example is not in KUBE_ALLOWED_HOSTS" in posted.content.decode()
    assert Cluster.objects.get(pk=site.cluster_id).kubeconfig == ""


def test_an_error_answer_reaches_viewers_only_as_its_status_phrase(
    http_stub: Callable[[Reply], HttpStub], site: ClusterSite, settings: Any
) -> None:
    stub = http_stub(Reply(500, f"{SECRET}\n".encode() * 10, {"Content-Type": "text/plain"}))
    settings.KUBE_ALLOWED_HOSTS = [*settings.KUBE_ALLOWED_HOSTS, stub.origin]
    Cluster.objects.filter(pk=site.cluster_id).update(kubeconfig=kubeconfig(stub.origin))

    observe_cluster_kube(site.cluster_id)

    cluster = Cluster.objects.get(pk=site.cluster_id)
    assert "HTTP 500: Internal Server Error" in kube_observation_of(cluster).error
    assert stub.received  # it was asked, and answered
    viewer = viewer_of(cluster.account)
    shown = viewer.get(f"/api/v1/clusters/{cluster.pk}/")
    page = viewer.get(reverse("dashboard:cluster", args=[cluster.pk]))
    assert shown.status_code == page.status_code == 200
    assert "Internal Server Error" in shown.content.decode()
    assert "Internal Server Error" in page.content.decode()
    assert SECRET not in shown.content.decode() + page.content.decode()


def test_a_stored_kubeconfig_whose_server_is_no_longer_allowed_is_not_used(
    listener: socket.socket, site: ClusterSite
) -> None:
    # Stored before the allow-list said otherwise (or written around the model's check).
    Cluster.objects.filter(pk=site.cluster_id).update(kubeconfig=kubeconfig(origin(listener)))

    observe_cluster_kube(site.cluster_id)

    error = kube_observation_of(site.cluster_id).error
    assert f"{origin(listener)} is not in KUBE_ALLOWED_HOSTS" in error
    assert not contacted(listener)


@pytest.mark.parametrize(
    ("scheme", "change", "problem"),
    [
        (
            "https",
            ('"}\nusers', '", tls-server-name: {host: x}}\nusers'),
            "tls-server-name must be text",
        ),
        ("http", (f"token: {TOKEN}", "token: {a: b}"), "token must be text, not a mapping"),
        ("http", (f"token: {TOKEN}", "username: [a]"), "username must be text, not a list"),
    ],
    ids=["tls-server-name", "token", "username"],
)
def test_a_stored_kubeconfig_with_a_value_of_the_wrong_type_gets_a_clear_observation_error(
    listener: socket.socket,
    site: ClusterSite,
    settings: Any,
    scheme: str,
    change: tuple[str, str],
    problem: str,
) -> None:
    settings.KUBE_ALLOWED_HOSTS = [*settings.KUBE_ALLOWED_HOSTS, origin(listener, scheme)]
    text = kubeconfig(origin(listener, scheme)).replace(*change)
    assert text != kubeconfig(origin(listener, scheme))
    Cluster.objects.filter(pk=site.cluster_id).update(kubeconfig=text)

    observe_cluster_kube(site.cluster_id)  # no exception

    observation = kube_observation_of(site.cluster_id)
    assert problem in observation.error
    assert not observation.complete
    assert not contacted(listener)


def test_the_account_admin_refuses_a_management_cluster_outside_the_allow_list(
    admin_client: Client, site: ClusterSite
) -> None:
    from tests.cloud.test_accounts import admin_form

    account = site.cluster.account
    url = reverse("admin:cloud_account_change", args=[account.pk])
    text = kubeconfig("https://10.0.0.1:6443")

    posted = admin_client.post(url, admin_form(account, new_capi_kubeconfig=text))

    assert posted.status_code == 200
    assert "10.0.0.1 is not in KUBE_ALLOWED_HOSTS" in posted.content.decode()
    assert Account.objects.get(pk=account.pk).capi_kubeconfig == ""
