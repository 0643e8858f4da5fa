"""Reads for pages and the API: the pod NICs, each VM's attach queue, leaked NICs and the
address use of the SR-IOV networks per location. Each takes the user and returns only
what their accounts hold (capvco_web.permissions)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q, QuerySet

from capvco_web.permissions import User, visible
from sriov.models import ExternalNetwork, LeakedNic, PodNic

State = PodNic.State


def pod_nics(
    user: User, *, cluster_id: int | None = None, live_only: bool = False
) -> QuerySet[PodNic]:
    """Pod NICs, newest first, with what a page shows of them (pod, node, VM, network,
    address, MAC, state; `requested_at` gives the age)."""
    rows = visible(user, PodNic.objects.all()).select_related("cluster", "location", "gone")
    if cluster_id is not None:
        rows = rows.filter(cluster_id=cluster_id)
    if live_only:
        rows = rows.exclude(state=State.RELEASED)
    return rows.order_by("-requested_at", "-pk")


@dataclass
class VmQueue:
    """One VM's NIC work: the request in its turn (attaching or detaching) and those
    waiting for it, oldest first."""

    cluster: str
    location: str
    vm_id: int
    node_name: str
    in_turn: list[PodNic] = field(default_factory=list)
    waiting: list[PodNic] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.waiting)

    @property
    def oldest_wait_since(self) -> datetime | None:
        return min((_waiting_since(row) for row in self.waiting), default=None)


def _waiting_since(row: PodNic) -> datetime:
    """A queued detach waits since its DEL or GC; an attach since it was asked for."""
    return row.detach_queued_at or row.requested_at


def vm_queues(
    user: User, *, cluster_id: int | None = None, nics: QuerySet[PodNic] | None = None
) -> list[VmQueue]:
    """The VMs with NIC attaches or detaches waiting or under way, busiest first (of the
    pod NICs `nics`, filtered, if given)."""
    busy = [State.REQUESTED, State.ATTACHING, State.DETACHING]
    rows = pod_nics(user, cluster_id=cluster_id)
    if nics is not None:
        rows = rows.filter(pk__in=nics.values("pk"))
    detach_queued = Q(detach_queued_at__isnull=False) & ~Q(state=State.RELEASED)
    rows = rows.filter(Q(state__in=busy) | detach_queued).order_by("requested_at")
    queues: dict[tuple[int, int], VmQueue] = {}
    for row in rows:
        key = (row.location_id, row.vm_id)
        queue = queues.get(key)
        if queue is None:
            queue = queues[key] = VmQueue(
                cluster=row.cluster.name,
                location=row.location.name,
                vm_id=row.vm_id,
                node_name=row.node_name,
            )
        waiting = row.state == State.REQUESTED or (
            row.detach_queued_at is not None and row.state in (State.ATTACHED, State.FAILED)
        )
        (queue.waiting if waiting else queue.in_turn).append(row)
    for queue in queues.values():
        queue.waiting.sort(key=_waiting_since)
    return sorted(queues.values(), key=lambda q: (-q.length, q.location, q.vm_id))


def leaked_nics(user: User, *, cluster_id: int | None = None) -> QuerySet[LeakedNic]:
    rows = visible(user, LeakedNic.objects.all()).select_related("cluster", "location")
    if cluster_id is not None:
        rows = rows.filter(cluster_id=cluster_id)
    return rows.order_by("leaked_since", "pk")


@dataclass(frozen=True)
class NetworkUse:
    location: str
    network_id: int
    name: str
    network: str
    prefix_len: int | None
    free_addresses: int | None
    nics: int
    """Addresses held by pod NICs (attached or on their way)."""


def network_address_use(user: User) -> list[NetworkUse]:
    """Per location and external network: free addresses (as last listed) and how many
    pod NICs hold one."""
    held: dict[tuple[int, int], int] = defaultdict(int)
    for row in (
        visible(user, PodNic.objects.all())
        .filter(state__in=[State.ATTACHING, State.ATTACHED, State.DETACHING])
        .values("location_id", "network_id")
        .annotate(n=Count("pk"))
    ):
        held[(row["location_id"], row["network_id"])] = row["n"]
    networks = visible(user, ExternalNetwork.objects.all()).select_related("location")
    return [
        NetworkUse(
            location=n.location.name,
            network_id=n.network_id,
            name=n.name,
            network=n.network,
            prefix_len=n.prefix_len,
            free_addresses=n.free_addresses,
            nics=held.get((n.location_id, n.network_id), 0),
        )
        for n in networks.order_by("location__name", "network_id")
    ]


def nic_state_counts() -> dict[str, int]:
    """Pod NICs per state, over every account (metrics)."""
    found = dict(PodNic.objects.values_list("state").annotate(n=Count("pk")))
    return {state: found.get(state, 0) for state in State.values}


def queue_lengths() -> dict[tuple[int, str, int], int]:
    """Attaches and detaches waiting per (account id, location name, VM), over every
    account (metrics); VMs with none are left out."""
    detach_waits = Q(detach_queued_at__isnull=False, state__in=[State.ATTACHED, State.FAILED])
    rows = (
        PodNic.objects.filter(Q(state=State.REQUESTED) | detach_waits)
        .values_list("location__account_id", "location__name", "vm_id")
        .annotate(n=Count("pk"))
    )
    return {(account_id, location, vm_id): n for account_id, location, vm_id, n in rows}


def leaked_count() -> int:
    return LeakedNic.objects.filter(~Q(mac="")).count()
