"""The process's client of a cluster: one for its requests, made again when what it is made
from changes, so a changed credential is never used stale (fake Kubernetes API, over
HTTPS)."""

from __future__ import annotations

import logging

import pytest

from capvco_web.integrations import kube
from clusters.models import Cluster
from kube.client import kube_client_shared, shared_clients
from tests.factories import ClusterFactory
from tests.kube_sim import KubeSimulator, pod_object

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _none_kept() -> None:
    shared_clients.clear()


def _cluster_on(kubeconfig: str) -> Cluster:
    cluster = ClusterFactory()
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=kubeconfig)
    return Cluster.objects.select_related("account").get(pk=cluster.pk)


def test_one_client_serves_the_clusters_requests(kube_sim: KubeSimulator) -> None:
    found = kube_sim.cluster("demo")
    kube_sim.put("demo", pod_object("web", node="node-0"))
    cluster = _cluster_on(found.kubeconfig_yaml)
    first = kube_client_shared(cluster)
    assert first.get_pod(namespace="default", name="web").name == "web"
    again = kube_client_shared(Cluster.objects.select_related("account").get(pk=cluster.pk))
    assert again is first
    assert again.get_pod(namespace="default", name="web").name == "web"


def test_a_changed_kubeconfig_gets_a_new_client_with_the_new_credential(
    kube_sim: KubeSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    old = kube_sim.cluster("demo", token="old-token")
    kube_sim.put("demo", pod_object("web", node="node-0"))
    cluster = _cluster_on(old.kubeconfig_yaml)
    before = kube_client_shared(cluster)
    assert before.get_pod(namespace="default", name="web").name == "web"
    # The cluster's credential is rotated: the old one is refused from now on.
    kube_sim.remove_cluster("demo")
    new = kube_sim.cluster("demo", token="new-token")
    kube_sim.put("demo", pod_object("web", node="node-0"))
    assert new.kubeconfig_yaml != old.kubeconfig_yaml
    with pytest.raises(kube.Unauthorized):
        before.get_pod(namespace="default", name="web")
    caplog.set_level(logging.DEBUG)
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=new.kubeconfig_yaml)
    cluster = Cluster.objects.select_related("account").get(pk=cluster.pk)
    after = kube_client_shared(cluster)
    assert after is not before
    assert after.get_pod(namespace="default", name="web").name == "web"
    # A kubeconfig is a secret: neither its text nor its token is logged.
    assert "new-token" not in caplog.text and new.kubeconfig_yaml not in caplog.text


def test_another_cluster_has_a_client_of_its_own(kube_sim: KubeSimulator) -> None:
    first = _cluster_on(kube_sim.cluster("demo").kubeconfig_yaml)
    second = _cluster_on(kube_sim.cluster("other").kubeconfig_yaml)
    kube_sim.put("other", pod_object("db", node="node-0"))
    assert kube_client_shared(first) is not kube_client_shared(second)
    assert kube_client_shared(second).get_pod(namespace="default", name="db").name == "db"
    with pytest.raises(kube.NotFound):
        kube_client_shared(first).get_pod(namespace="default", name="db")
