"""Pods that ask for GPUs and are not scheduled, and why, from the Kubernetes mirror.

A pod asks for a GPU type with a `capvco.io/gpu-type` nodeSelector, or for any GPU node
without one. Only Ready, schedulable nodes count: the scheduler places nothing on the
others (a cordoned node is as good as not Ready). Why a pod
waits, first match:

* its cluster has no node at all (as last observed);
* no Ready node of its type advertises GPUs;
* no such node has as many GPUs free as it asks for: those of that type are requested
  by pods already placed on them;
* otherwise GPUs are free where it could go: the scheduler has not placed it yet, or
  something other than GPUs (CPU, memory, taints, affinity) keeps it off them.

Where no node can take it, the reason goes on to what would make room (`Why.then`): no pool
of the cluster makes GPUs of its type, or none makes a machine with as many as it asks
for (a pod's GPUs are on one node, a machine's on one card); else a machine of such a pool
that waits for capacity, and the vGPUs orphaned by the cluster itself that are billed on
cards of that type there (`Why.orphans_hold_room`: the page links to them, to release
them). A pool's type is that of the cards it matches in its location (as its nodes'
`capvco.io/gpu-type` label will say): pools spelled "A100" and "NVIDIA A100" both make
`nvidia-a100`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, QuerySet

from capvco_web.integrations.kube import GPU_TYPE_LABEL
from clusters.models import Cluster, Machine, MachinePool
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import CAPACITY_WAIT, gpu_type_of, matching_cards
from gpus.selectors import ORPHANED
from kube.gpu_nodes import gpu_label_value
from kube.models import KubeNode, KubePod
from kube.selectors import ACTIVE_POD_PHASES, kube_nodes_with_requests

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
    then: str = ""
    """What would make room, when no node can take it ("" when nothing more is known)."""
    orphans_hold_room: bool = False
    """vGPUs orphaned by the pod's own cluster hold the room: the page links to them."""

    @property
    def told(self) -> str:
        return f"{self.text}; {self.then}" if self.then else self.text


@dataclass(frozen=True)
class PoolGpus:
    """What a cluster's GPU pool makes: per machine, of which types (label values)."""

    name: str
    types: frozenset[str]
    per_machine: int
    location_id: int
    location: str
    waiting: tuple[tuple[str, str], ...] = ()
    """Its machines waiting for capacity: (name, message)."""


@dataclass
class ClusterRoom:
    """A cluster's GPU pools, and the vGPUs orphaned by it, billed on cards of each type
    (by location and type)."""

    cluster_id: int
    pools: list[PoolGpus] = field(default_factory=list)
    orphans: dict[tuple[int, str], int] = field(default_factory=dict)


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


NEXT_CODES = frozenset({NO_NODE, NO_NODE_OF_TYPE, ALL_REQUESTED})
WAITING_TOLD = 3  # machines named in one reason


def what_makes_room(*, gpus: int, gpu_type: str, room: ClusterRoom) -> tuple[str, bool]:
    """The step after "no node can take it": why no pool makes a machine that could, or
    what keeps one from being made; and whether the cluster's own orphans hold the room."""
    kind = f" of type {gpu_type}" if gpu_type else ""
    pools = [p for p in room.pools if not gpu_type or gpu_type in p.types]
    if not pools:
        return f"no pool of this cluster makes GPUs{kind}", False
    fitting = [p for p in pools if p.per_machine >= gpus]
    if not fitting:
        makes = ", ".join(f"pool {p.name} makes {p.per_machine} per machine" for p in pools)
        return (
            f"no pool of this cluster makes a machine with {gpus} GPUs{kind}: {makes} "
            "(a pod's GPUs are on one node)",
            False,
        )
    waiting = [(p, name, why) for p in fitting for name, why in p.waiting]
    if not waiting:
        return "", False
    told = [f"machine {name} of pool {p.name} is {why}" for p, name, why in waiting]
    if len(told) > WAITING_TOLD:
        told = [*told[:WAITING_TOLD], f"and {len(told) - WAITING_TOLD} more machines"]
    held: dict[str, int] = {}
    for p, _, _ in waiting:
        count = sum(
            n
            for (location_id, label), n in room.orphans.items()
            if location_id == p.location_id and (label in p.types)
        )
        if count:
            held[p.location] = count
    if not held:
        return "; ".join(told), False
    orphans = "; ".join(
        f"{n} vGPU{'s' if n != 1 else ''} orphaned by this cluster "
        f"{'is' if n == 1 else 'are'} billed at {location}"
        for location, n in sorted(held.items())
    )
    return f"{'; '.join(told)}; {orphans}: releasing them makes room", True


def cluster_rooms(cluster_ids: set[int]) -> dict[int, ClusterRoom]:
    """Each cluster's GPU pools with the types they make and their machines waiting for
    capacity, and its orphaned vGPUs by location and type: four queries for them all."""
    rooms = {pk: ClusterRoom(pk) for pk in cluster_ids}
    pools = list(
        MachinePool.objects.filter(cluster__in=cluster_ids, gpu_count__gt=0)
        .select_related("site__location")
        .order_by("name", "pk")
    )
    locations = {pool.site.location_id for pool in pools}
    cards = list(GpuProfile.objects.filter(location__in=locations).order_by("profile_id"))
    cards_at: dict[int, list[GpuProfile]] = defaultdict(list)
    for card in cards:
        cards_at[card.location_id].append(card)
    waiting: dict[int, list[tuple[str, str]]] = defaultdict(list)
    rows = (
        Machine.objects.filter(pool__in=pools, failure_message__startswith=CAPACITY_WAIT)
        .exclude(phase=Machine.Phase.FAILED)
        .order_by("name")
        .values_list("pool_id", "name", "failure_message")
    )
    for pool_id, name, message in rows:
        waiting[pool_id].append((name, message))
    for pool in pools:
        matched = matching_cards(
            cards_at[pool.site.location_id],
            gpu_type=pool.gpu_type,
            profile_id=pool.gpu_profile_id,
        )
        # A location not listed yet: the pool's own spelling is all there is to go by.
        types = {gpu_label_value(gpu_type_of(c)) for c in matched} or {
            gpu_label_value(pool.gpu_type)
        }
        rooms[pool.cluster_id].pools.append(
            PoolGpus(
                pool.name,
                frozenset(types),
                pool.gpu_count,
                pool.site.location_id,
                pool.site.location.name,
                tuple(waiting[pool.pk]),
            )
        )
    label_of = {(c.location_id, c.profile_id): gpu_label_value(gpu_type_of(c)) for c in cards}
    # A name is a cluster's within its account (an orphan's owner is parsed from its name).
    owners = {
        (account_id, name): pk
        for pk, account_id, name in Cluster.objects.filter(pk__in=cluster_ids).values_list(
            "pk", "account_id", "name"
        )
    }
    orphans = (
        VgpuReservation.objects.filter(
            ORPHANED, location__in=locations, owner_cluster__in={name for _, name in owners}
        )
        .values_list("owner_cluster", "location__account_id", "location_id", "gpu_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for owner, account_id, location_id, gpu_id, n in orphans:
        label = label_of.get((location_id, gpu_id))
        cluster_id = owners.get((account_id, owner))
        if label is not None and cluster_id is not None:
            key = (location_id, label)
            rooms[cluster_id].orphans[key] = rooms[cluster_id].orphans.get(key, 0) + n
    return rooms


def gpu_nodes_by_cluster(nodes: QuerySet[KubeNode]) -> dict[int, list[GpuNode]]:
    """Every node of `nodes` by cluster, with the GPUs pods placed on it request: one query."""
    found: dict[int, list[GpuNode]] = defaultdict(list)
    annotated: QuerySet[Any] = kube_nodes_with_requests(nodes)
    rows = annotated.values_list(
        "cluster_id", "labels", "ready", "unschedulable", "gpu_allocatable", "gpu_requested"
    )
    for cluster_id, labels, ready, cordoned, allocatable, requested in rows.order_by():
        gpu_type = str((labels or {}).get(GPU_TYPE_LABEL, ""))
        # A cordoned node takes no new pod: for a pending pod it is as good as not Ready.
        found[cluster_id].append(GpuNode(gpu_type, ready and not cordoned, allocatable, requested))
    return found


def pending_pods_explained(pods: Iterable[KubePod], nodes: QuerySet[KubeNode]) -> list[PendingPod]:
    """Each of `pods` (from `unscheduled_gpu_pods`) with why it waits, judged from the
    nodes of its cluster among `nodes`: one query for the nodes of all their clusters."""
    pods = list(pods)
    if not pods:
        return []
    cluster_ids = {pod.cluster_id for pod in pods}
    by_cluster = gpu_nodes_by_cluster(nodes.filter(cluster__in=cluster_ids))
    rooms: dict[int, ClusterRoom] | None = None
    found = []
    for pod in pods:
        why = why_pending(
            gpus=pod.gpu_requests, gpu_type=pod.gpu_type, nodes=by_cluster[pod.cluster_id]
        )
        if why.code in NEXT_CODES:
            rooms = cluster_rooms(cluster_ids) if rooms is None else rooms
            then, held = what_makes_room(
                gpus=pod.gpu_requests, gpu_type=pod.gpu_type, room=rooms[pod.cluster_id]
            )
            why = Why(why.code, why.text, then, held)
        found.append(PendingPod(pod, why))
    return found
