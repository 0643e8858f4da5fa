"""Pods that ask for GPUs and are not scheduled, and why, from the Kubernetes mirror.

A pod asks for a GPU type with a `capvco.io/gpu-type` nodeSelector, or for any GPU node
without one. Only Ready nodes count: the scheduler places nothing on the others. Why a pod
waits, first match:

* its cluster has no node at all (as last observed);
* no Ready node of its type advertises GPUs;
* no such node has as many GPUs free as it asks for: those of that type are requested
  by pods already placed on them;
* otherwise GPUs are free where it could go: the scheduler has not placed it yet, or
  something other than GPUs (CPU, memory, taints, affinity) keeps it off them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from capvco_web.integrations.kube import GPU_TYPE_LABEL
from clusters.models import KubeNode, KubePod
from clusters.selectors import ACTIVE_POD_PHASES, kube_nodes_with_requests

NO_NODE = "no-node"
NO_NODE_OF_TYPE = "no-node-of-type"
ALL_REQUESTED = "all-requested"
GPUS_FREE = "gpus-free"


@dataclass(frozen=True)
class GpuNode:
    """What the judgement needs of a node."""

    gpu_type: str
    ready: bool
    allocatable: int
    requested: int

    @property
    def free(self) -> int:
        return max(self.allocatable - self.requested, 0)


@dataclass(frozen=True)
class Why:
    code: str
    text: str


@dataclass(frozen=True)
class PendingPod:
    pod: KubePod
    why: Why


def unscheduled_gpu_pods(pods: QuerySet[KubePod]) -> QuerySet[KubePod]:
    """The pods of `pods` that ask for GPUs and are on no node, oldest first."""
    return pods.filter(node_name="", phase__in=ACTIVE_POD_PHASES, gpu_requests__gt=0).order_by(
        "first_seen_at", "pk"
    )


def why_pending(*, gpus: int, gpu_type: str, nodes: Iterable[GpuNode]) -> Why:
    """Why a pod asking for `gpus` GPUs of `gpu_type` ("": any) is not placed among the
    `nodes` of its cluster."""
    nodes = list(nodes)
    what = f"GPU type {gpu_type}" if gpu_type else "GPUs"
    if not nodes:
        return Why(NO_NODE, "its cluster has no node at all")
    fitting = [
        node
        for node in nodes
        if node.ready and node.allocatable and (not gpu_type or node.gpu_type == gpu_type)
    ]
    if not fitting:
        return Why(NO_NODE_OF_TYPE, f"no Ready node with {what}")
    most = max(node.free for node in fitting)
    if most < gpus:
        requested = sum(node.requested for node in fitting)
        allocatable = sum(node.allocatable for node in fitting)
        return Why(
            ALL_REQUESTED,
            f"all {what} requested: {requested} of {allocatable} on {len(fitting)} "
            f"node{'s' if len(fitting) != 1 else ''}, at most {most} free on one",
        )
    return Why(
        GPUS_FREE,
        f"{most} free on one node with {what}: not placed yet, or kept off by something "
        "other than GPUs (CPU, memory, taints, affinity)",
    )


def gpu_nodes_by_cluster(nodes: QuerySet[KubeNode]) -> dict[int, list[GpuNode]]:
    """Every node of `nodes` by cluster, with the GPUs pods placed on it request: one query."""
    found: dict[int, list[GpuNode]] = defaultdict(list)
    annotated: QuerySet[Any] = kube_nodes_with_requests(nodes)
    rows = annotated.values_list(
        "cluster_id", "labels", "ready", "gpu_allocatable", "gpu_requested"
    )
    for cluster_id, labels, ready, allocatable, requested in rows.order_by():
        gpu_type = str((labels or {}).get(GPU_TYPE_LABEL, ""))
        found[cluster_id].append(GpuNode(gpu_type, ready, allocatable, requested))
    return found


def pending_pods_explained(pods: Iterable[KubePod], nodes: QuerySet[KubeNode]) -> list[PendingPod]:
    """Each of `pods` (from `unscheduled_gpu_pods`) with why it waits, judged from the
    nodes of its cluster among `nodes`: one query for the nodes of all their clusters."""
    pods = list(pods)
    if not pods:
        return []
    by_cluster = gpu_nodes_by_cluster(nodes.filter(cluster__in={pod.cluster_id for pod in pods}))
    return [
        PendingPod(
            pod,
            why_pending(
                gpus=pod.gpu_requests, gpu_type=pod.gpu_type, nodes=by_cluster[pod.cluster_id]
            ),
        )
        for pod in pods
    ]
