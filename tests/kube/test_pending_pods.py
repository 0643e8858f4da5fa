"""Why a pod that asks for GPUs is not scheduled, judged from a fixed Kubernetes mirror:
no node at all, no Ready node of its GPU type, all GPUs of that type requested, or GPUs
free (something else keeps it waiting); and a pod's nodeSelector type is mirrored."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from capvco_web.integrations.kube import parse_pod
from clusters.models import Cluster
from kube.models import KubeNode, KubePod
from kube.pending_pods import (
    ALL_REQUESTED,
    GPUS_FREE,
    NO_NODE,
    NO_NODE_OF_TYPE,
    pending_pods_explained,
    unscheduled_gpu_pods,
)
from tests.factories import ClusterFactory, KubeNodeFactory, KubePodFactory
from tests.kube_sim import pod_object

pytestmark = pytest.mark.django_db
A100, T4 = "nvidia-a100", "nvidia-t4"


def _node(cluster: Cluster, name: str, gpu_type: str, gpus: int, ready: bool = True) -> KubeNode:
    return KubeNodeFactory(
        cluster=cluster,
        name=name,
        labels={"capvco.io/gpu-type": gpu_type} if gpu_type else {},
        gpu_capacity=gpus,
        gpu_allocatable=gpus,
        ready=ready,
    )


def _pod(cluster: Cluster, name: str, gpus: int, gpu_type: str = "", node: str = "") -> KubePod:
    return KubePodFactory(
        cluster=cluster,
        name=name,
        node_name=node,
        phase=KubePod.Phase.RUNNING if node else KubePod.Phase.PENDING,
        gpu_requests=gpus,
        gpu_type=gpu_type,
    )


def _why() -> dict[str, str]:
    pods = unscheduled_gpu_pods(KubePod.objects.all())
    return {row.pod.name: row.why.code for row in pending_pods_explained(pods, KubeNode.objects)}


def test_each_pending_gpu_pod_says_why_it_waits() -> None:
    busy = ClusterFactory(name="busy")
    _node(busy, "a100-0", A100, 2)
    _node(busy, "a100-1", A100, 2)
    _node(busy, "t4-0", T4, 1)
    _node(busy, "t4-down", T4, 4, ready=False)  # the scheduler places nothing there
    _node(busy, "cpu-0", "", 0)
    _pod(busy, "train-0", 2, A100, node="a100-0")  # holds all of a100-0
    _pod(busy, "train-1", 1, A100, node="a100-1")  # a100-1 has one free
    KubePodFactory(  # finished: holds nothing
        cluster=busy, name="done", node_name="a100-1", phase=KubePod.Phase.SUCCEEDED
    )
    _pod(busy, "fits", 1, A100)  # one free on a100-1
    _pod(busy, "too-big", 2, A100)  # at most one free on one A100 node
    _pod(busy, "t4-two", 2, T4)  # the Ready T4 node has one
    _pod(busy, "h100", 1, "nvidia-h100")  # no such node
    _pod(busy, "any-gpu", 1)  # any GPU node: a100-1 has one free
    _pod(busy, "cpu-only", 0)  # asks for no GPU: not listed
    _pod(busy, "placed", 1, T4, node="t4-0")  # scheduled: not listed
    empty = ClusterFactory(name="empty", account=busy.account)
    _pod(empty, "lonely", 1, A100)

    assert _why() == {
        "fits": GPUS_FREE,
        "too-big": ALL_REQUESTED,
        "t4-two": ALL_REQUESTED,
        "h100": NO_NODE_OF_TYPE,
        "any-gpu": GPUS_FREE,
        "lonely": NO_NODE,
    }


def test_any_gpu_pod_waits_for_gpus_when_every_gpu_node_is_full() -> None:
    cluster = ClusterFactory()
    _node(cluster, "gpu-0", A100, 1)
    _pod(cluster, "holder", 1, node="gpu-0")
    _pod(cluster, "waiting", 1)
    rows = pending_pods_explained(unscheduled_gpu_pods(KubePod.objects.all()), KubeNode.objects)
    assert [(row.pod.name, row.why.code) for row in rows] == [("waiting", ALL_REQUESTED)]
    assert rows[0].why.text == "all GPUs requested: 1 of 1 on 1 node, at most 0 free on one"
    _node(cluster, "cpu-0", "", 0)
    KubeNode.objects.filter(name="gpu-0").delete()
    assert _why() == {"waiting": NO_NODE_OF_TYPE}


def test_the_reasons_of_many_clusters_cost_two_queries() -> None:
    for n in range(5):
        cluster = ClusterFactory()
        _node(cluster, f"n-{n}", A100, 1)
        _pod(cluster, f"p-{n}", 1, A100)
    with CaptureQueriesContext(connection) as queries:
        pods = unscheduled_gpu_pods(KubePod.objects.select_related("cluster"))
        assert len(pending_pods_explained(pods, KubeNode.objects.all())) == 5
    assert len(queries) == 2


def test_a_pods_gpu_type_is_its_node_selector() -> None:
    obj = pod_object("p", gpus=1, gpu_type=A100)
    obj["metadata"]["uid"] = "u-1"
    assert parse_pod(obj).gpu_type == A100
    del obj["spec"]["nodeSelector"]
    assert parse_pod(obj).gpu_type == ""
