"""A cluster whose Kubernetes observation fails says so where an operator looks first: the
clusters list, the overview and `/metrics` (a gauge per cluster, and the age of its last
complete observation), not only on its own page; the fake API server over HTTP."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from clusters.models import Cluster, MachinePool
from kube.client import kube_client
from kube.observe import cluster_kube_observe
from kube.selectors import kube_observation_failing
from kube.tasks import observe_cluster_kube
from tests.factories import ClusterFactory, kube_observed_as
from tests.gpus.test_metrics import promtool
from tests.kube_sim import KubeSimulator, node_object

INTERVAL = timedelta(seconds=30)


@pytest.fixture
def prod(kube_sim: KubeSimulator, pool: MachinePool, settings: Any) -> Cluster:
    """Cluster `prod` on the fake API server, with one node, observed once completely."""
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    settings.OBSERVE_INTERVAL = INTERVAL
    found = kube_sim.cluster("prod")
    kube_sim.put("prod", node_object("capvco-prod-gpu-0", gpus=1))
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        assert cluster_kube_observe(client=client, cluster=cluster).complete
    return Cluster.objects.get(pk=pool.cluster_id)


def _fail_listing(kube_sim: KubeSimulator, cluster: Cluster) -> Cluster:
    kube_sim.fault(operation="list pods", status=503)
    try:
        with kube_client(cluster) as client:
            assert not cluster_kube_observe(client=client, cluster=cluster).complete
    finally:
        kube_sim.clear_faults()
    return Cluster.objects.get(pk=cluster.pk)


def _gauges(client: Client) -> dict[tuple[str, str], float]:
    text = client.get("/metrics").content.decode()
    checked = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return {
        (sample.name, sample.labels["cluster"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("capvco_cluster_kube_")
    }


def test_a_failing_observation_shows_on_the_list_the_overview_and_metrics(
    kube_sim: KubeSimulator, prod: Cluster, admin_client: Client
) -> None:
    ClusterFactory(account=prod.account, name="quiet")  # no kubeconfig: not observed
    before = _gauges(Client())
    assert before[("capvco_cluster_kube_observation_ok", "prod")] == 1
    assert 0 <= before[("capvco_cluster_kube_observation_age_seconds", "prod")] < 30
    assert "quiet" not in {cluster for _, cluster in before}
    assert "observation failing" not in admin_client.get("/clusters/").content.decode()

    prod = _fail_listing(kube_sim, prod)

    listing = admin_client.get("/clusters/").content.decode()
    row = listing[listing.index(f'id="cluster-{prod.pk}"') :].split("</tr>", 1)[0]
    assert "observation failing" in row and "503" in row
    assert f'href="/clusters/{prod.pk}/#kubernetes"' in row
    overview = admin_client.get("/").content.decode()
    failing = overview[overview.index('id="kube-failing"') :].split("</table>", 1)[0]
    assert "prod" in failing and "pods: " in failing
    after = _gauges(Client())
    age = "capvco_cluster_kube_observation_age_seconds"
    assert after[("capvco_cluster_kube_observation_ok", "prod")] == 0
    # The age keeps counting from the last complete observation, not the failed one.
    assert after[(age, "prod")] >= before[(age, "prod")]


def test_an_unreadable_kubeconfig_is_a_failing_observation(prod: Cluster) -> None:
    Cluster.objects.filter(pk=prod.pk).update(kubeconfig="not: [a kubeconfig")
    observe_cluster_kube(prod.pk)
    now = timezone.now()
    failing = kube_observation_failing(Cluster.objects.all(), now=now, interval=INTERVAL)
    assert list(failing) == [prod]
    samples = _gauges(Client())
    assert samples[("capvco_cluster_kube_observation_ok", "prod")] == 0


def test_a_cluster_without_a_complete_observation_for_two_intervals_is_failing(
    prod: Cluster, admin_client: Client
) -> None:
    now = timezone.now()
    assert not kube_observation_failing(Cluster.objects.all(), now=now, interval=INTERVAL)
    later = now + 2 * INTERVAL + timedelta(seconds=1)
    assert list(kube_observation_failing(Cluster.objects.all(), now=later, interval=INTERVAL)) == [
        prod
    ]
    kube_observed_as(prod, last_complete_at=now - timedelta(hours=1))
    assert "stale" in admin_client.get("/clusters/").content.decode()


def test_a_cluster_not_observed_yet_is_not_failing(pool: MachinePool) -> None:
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig="apiVersion: v1")
    now = timezone.now()
    assert not kube_observation_failing(Cluster.objects.all(), now=now, interval=INTERVAL)
