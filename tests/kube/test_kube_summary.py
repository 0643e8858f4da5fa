"""What the API and the selectors tell of a cluster's Kubernetes: a summary per cluster
(nodes, GPUs allocatable and requested, flags), the GPU labels, requests and flag of each
node, the GPU add-on switch, and GPUs per location and type."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from capvco_web.models import AuditEvent
from clusters.capacity import KubeGpus
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from kube.models import KubeNode, KubePod
from kube.selectors import kube_gpus_by_location_and_type
from tests.factories import (
    ClusterFactory,
    KubeNodeFactory,
    KubePodFactory,
    MachineNodeFactory,
)

pytestmark = pytest.mark.django_db

A100 = {"capvco.io/gpu-type": "nvidia-a100", "capvco.io/gpu-count": "1"}


@pytest.fixture
def observed(pool: MachinePool) -> Cluster:
    """Cluster `prod` as an observe pass left it: two GPU nodes of its machines (one of
    them without GPUs advertised, flagged), a control-plane node, an unowned node; pods
    on them, one waiting to be scheduled, one finished."""
    cluster = pool.cluster
    gpu_0, gpu_1 = Machine.objects.order_by("index")
    KubeNodeFactory(cluster=cluster, name="capvco-prod-gpu-0", machine=gpu_0, labels=A100)
    KubeNodeFactory(
        cluster=cluster, name="capvco-prod-gpu-1", machine=gpu_1, labels=A100, gpu_allocatable=0,
        gpus_missing=True, gpus_missing_reason="No nvidia.com/gpu advertised",
    )  # fmt: skip
    KubeNodeFactory(cluster=cluster, name="cp-0", gpu_capacity=0, gpu_allocatable=0, ready=False)
    KubeNodeFactory(cluster=cluster, name="stray", unowned_since=timezone.now())
    KubePodFactory(cluster=cluster, node_name="capvco-prod-gpu-0", gpu_requests=1)
    KubePodFactory(cluster=cluster, node_name="stray", gpu_requests=1)
    KubePodFactory(cluster=cluster, node_name="", phase=KubePod.Phase.PENDING, gpu_requests=2)
    KubePodFactory(
        cluster=cluster,
        node_name="capvco-prod-gpu-0",
        phase=KubePod.Phase.SUCCEEDED,
        gpu_requests=1,
    )
    MachineNodeFactory(machine=gpu_1)
    return cluster


def test_the_cluster_api_summarises_its_kubernetes(api: APIClient, observed: Cluster) -> None:
    ClusterFactory(account=observed.account, name="quiet")

    with CaptureQueriesContext(connection) as queries:
        listed = api.get("/api/v1/clusters/").json()

    summaries = {c["name"]: c["kubernetes"] for c in listed["results"]}
    assert summaries["prod"] == {
        "nodes": 4,
        "nodes_ready": 3,
        "gpu_capacity": 3,
        "gpu_allocatable": 2,
        "gpu_requested": 2,  # pods on nodes, finished ones not counted
        "gpu_unscheduled": 2,
        "nodes_unowned": 1,
        "nodes_gpus_missing": 1,
        "machines_node_missing": 1,
    }
    assert set(summaries["quiet"].values()) == {0}
    # The summary is part of the one query that lists the clusters.
    assert sum("clusters_kubenode" in q["sql"] for q in queries.captured_queries) == 1
    detail = api.get(f"/api/v1/clusters/{observed.pk}/").json()
    assert detail["kubernetes"] == summaries["prod"]
    assert (detail["gpu_addon"], detail["imported_from"]) == (False, "")


def test_the_node_api_shows_gpu_labels_requests_and_the_flag(
    api: APIClient, observed: Cluster
) -> None:
    nodes = api.get("/api/v1/nodes/", {"cluster__name": "prod", "gpu_type": "nvidia-a100"}).json()

    shown = {
        n["name"]: (n["gpu_type_label"], n["gpu_count_label"], n["gpu_allocatable"],
                    n["gpu_requested"], n["gpus_missing"])
        for n in nodes["results"]
    }  # fmt: skip
    assert shown == {
        "capvco-prod-gpu-0": ("nvidia-a100", "1", 1, 1, False),
        "capvco-prod-gpu-1": ("nvidia-a100", "1", 0, 0, True),
    }
    flagged = api.get("/api/v1/nodes/", {"gpus_missing": "true"}).json()["results"]
    assert [n["gpus_missing_reason"] for n in flagged] == ["No nvidia.com/gpu advertised"]


def test_the_gpu_addon_is_switched_through_the_api_and_audited(
    api: APIClient, site: ClusterSite
) -> None:
    url = f"/api/v1/clusters/{site.cluster_id}/gpu-addon/"

    on = api.put(url, {"enabled": True, "reason": "GPU pools coming"}, format="json")
    again = api.put(url, {"enabled": True}, format="json")
    bad = api.put(url, {"enabled": "maybe"}, format="json")

    assert on.status_code == 200 and on.json()["gpu_addon"] is True
    assert again.status_code == 200
    assert bad.status_code == 400 and "enabled" in bad.json()["fields"]
    (event,) = AuditEvent.objects.filter(action="cluster.gpu_addon_set")
    assert (event.before, event.after, event.reason) == (
        {"gpu_addon": False}, {"gpu_addon": True}, "GPU pools coming",
    )  # fmt: skip


def test_gpus_per_location_and_type_in_kubernetes(observed: Cluster) -> None:
    location = observed.sites.get().location

    found = kube_gpus_by_location_and_type(KubeNode.objects.all())

    assert found == {
        (location.pk, "nvidia-a100"): KubeGpus(
            allocatable=1,  # gpu-1 advertises none: flagged
            requested=1,
        )
    }  # the unowned node's GPUs are in no location
    assert kube_gpus_by_location_and_type(KubeNode.objects.all(), requested=False) == {
        (location.pk, "nvidia-a100"): KubeGpus(allocatable=1, requested=0)
    }


def test_the_gpu_addon_field_is_taken_at_create(api: APIClient, site: ClusterSite) -> None:
    body: dict[str, Any] = {"name": "edge", "account": site.cluster.account_id, "gpu_addon": True}

    created = api.post("/api/v1/clusters/", body, format="json")

    assert created.status_code == 201 and created.json()["gpu_addon"] is True
    assert set(created.json()["kubernetes"].values()) == {0}
