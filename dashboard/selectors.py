"""What the dashboard's pages show, read from the database in a fixed number of queries
whatever the number of rows. Each takes querysets the caller already narrowed to what
the user may see."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from cloud.models import Location, VirtualMachine
from clusters.models import Cluster, Machine, MachinePool
from clusters.orphans import vms_not_ours
from gpus import naming
from gpus.models import (
    BILLED_STATES,
    CENT,
    GpuProfile,
    VgpuReservation,
    cost_of,
    hourly_price,
    hours_between,
)
from gpus.resolve import GpuUnavailable, gpu_profile_resolve, gpu_type_of, matching_cards, offers
from kube.models import KubeNode, KubePod
from kube.nodes import CONTROL_PLANE_LABELS
from kube.selectors import ACTIVE_POD_PHASES, cluster_observation

State = VgpuReservation.State
HOUR = Decimal(3600)

# --- money: billed but not used ---------------------------------------------------------


@dataclass(frozen=True)
class Waste:
    """Reservations of one kind in one location: billed, and doing nothing for us."""

    location: Location
    count: int
    oldest: datetime | None
    hours: Decimal  # summed over the reservations, since each began to waste
    link: str  # the query of the list behind it

    @property
    def hourly_cost(self) -> Decimal:
        return (self.count * hourly_price(self.location.vgu_price)).quantize(Decimal("0.01"))

    @property
    def accrued_cost(self) -> Decimal:
        return cost_of(self.hours, self.location.vgu_price)


@dataclass(frozen=True)
class CurrencyTotal:
    currency: str
    count: int
    hourly_cost: Decimal
    accrued_cost: Decimal


@dataclass
class WasteKind:
    key: str
    title: str
    explanation: str
    query: dict[str, str]
    rows: list[Waste] = field(default_factory=list)

    @property
    def totals(self) -> list[CurrencyTotal]:
        by_currency: dict[str, list[Waste]] = defaultdict(list)
        for row in self.rows:
            by_currency[row.location.currency].append(row)
        return [
            CurrencyTotal(
                currency=currency,
                count=sum(r.count for r in rows),
                hourly_cost=sum((r.hourly_cost for r in rows), Decimal(0)),
                accrued_cost=sum((r.accrued_cost for r in rows), Decimal(0)),
            )
            for currency, rows in sorted(by_currency.items())
        ]

    @property
    def count(self) -> int:
        return sum(r.count for r in self.rows)

    @property
    def oldest(self) -> datetime | None:
        return min((r.oldest for r in self.rows if r.oldest), default=None)

    def link(self, location: Location | None = None) -> str:
        query = {**self.query, "location": str(location.pk)} if location else self.query
        return "?" + urlencode(query)


OURS = Q(name__startswith=naming.PREFIX)


@dataclass(frozen=True)
class WasteRule:
    key: str
    title: str
    explanation: str
    query: dict[str, str]  # the filters of the list behind it
    which: Q  # of the billed reservations
    since: Any  # an expression: when each began to waste


WASTE_RULES = [
    WasteRule(
        "unassigned",
        "Billed, on no VM",
        "Reservations attached to no VM: whitesky bills them all the same.",
        {"unassigned": "true"},
        Q(state=State.RESERVED, vm_id__isnull=True),
        Coalesce("listed__unassigned_since", "created_at"),
    ),
    WasteRule(
        "orphans",
        "Orphans",
        "Named by us, and no machine owns them: released after the grace period, or by a person.",
        {"orphaned": "true", "not_ours": "false"},
        Q(listed__orphaned_since__isnull=False) & OURS,
        F("listed__orphaned_since"),
    ),
    WasteRule(
        "leaks",
        "Not named by us",
        "Reservations of the account that we did not make: only a person releases them.",
        {"orphaned": "true", "not_ours": "true"},
        Q(listed__orphaned_since__isnull=False) & ~OURS,
        F("listed__orphaned_since"),
    ),
]


def money_wasted(
    *, reservations: QuerySet[VgpuReservation], locations: Iterable[Location], now: datetime
) -> list[WasteKind]:
    """Per kind (billed on no VM, orphans, not named by us) and location: how many, what
    they cost per hour, what they cost since they began to waste, the oldest. One query."""
    moment = Value(now, output_field=DateTimeField())
    aggregates: dict[str, Any] = {}
    for rule in WASTE_RULES:
        age = ExpressionWrapper(moment - rule.since, output_field=DurationField())
        aggregates[f"{rule.key}_n"] = Count("pk", filter=rule.which)
        aggregates[f"{rule.key}_age"] = Sum(age, filter=rule.which)
        aggregates[f"{rule.key}_oldest"] = Min(rule.since, filter=rule.which)
    rows: Iterable[Any] = (
        reservations.filter(state__in=BILLED_STATES)
        .values("location_id")
        .annotate(**aggregates)
        .order_by()
    )
    by_id = {location.pk: location for location in locations}
    kinds = [WasteKind(r.key, r.title, r.explanation, r.query) for r in WASTE_RULES]
    for row in rows:
        location = by_id.get(row["location_id"])
        if location is None:
            continue
        for kind in kinds:
            if n := row[f"{kind.key}_n"]:
                wasted: timedelta = row[f"{kind.key}_age"] or timedelta(0)
                kind.rows.append(
                    Waste(
                        location=location,
                        count=n,
                        oldest=row[f"{kind.key}_oldest"],
                        hours=Decimal(wasted.total_seconds()) / HOUR,
                        link=kind.link(location),
                    )
                )
    for kind in kinds:
        kind.rows.sort(key=lambda w: w.location.name)
    return kinds


# --- clusters ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolGpus:
    """How a pool's GPU type resolves in its site: the cards it matches, and the one the
    next machine's vGPUs would go on (or why none would)."""

    cards: int
    free: int
    next_card: str
    problem: str


def pool_gpus(pool: MachinePool, cards: Sequence[GpuProfile]) -> PoolGpus | None:
    if not pool.wants_gpus:
        return None
    here = [c for c in cards if c.location_id == pool.site.location_id]
    matches = matching_cards(here, gpu_type=pool.gpu_type, profile_id=pool.gpu_profile_id)
    try:
        card = gpu_profile_resolve(
            here,
            location=pool.site.location.name,
            count=pool.gpu_count,
            gpu_type=pool.gpu_type,
            profile_id=pool.gpu_profile_id,
        )
    except GpuUnavailable as exc:
        return PoolGpus(len(matches), sum(c.available_instances for c in matches), "", str(exc))
    label = f"{card.profile_id} ({gpu_type_of(card)}, {card.available_instances} free)"
    return PoolGpus(len(matches), sum(c.available_instances for c in matches), label, "")


def held_by_machine(
    reservations: QuerySet[VgpuReservation], machines: Sequence[Machine]
) -> dict[int, list[VgpuReservation]]:
    """The billed vGPUs of each machine, in one query."""
    held: dict[int, list[VgpuReservation]] = defaultdict(list)
    rows = reservations.filter(
        machine__in=[m.pk for m in machines], state__in=BILLED_STATES
    ).order_by("machine_id", "owner_index", "pk")
    for row in rows:
        assert row.machine_id is not None
        held[row.machine_id].append(row)
    return held


# --- a new cluster: will it fit ----------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """How many of a pool's machines the cards of its type in its location hold now."""

    machines: int
    replicas: int
    free: int
    most_on_one_card: int
    offered: str  # what the location offers, when the type is not there

    @property
    def fits(self) -> bool:
        return self.machines >= self.replicas

    def __str__(self) -> str:
        if self.offered:
            return f"not offered here; the location offers {self.offered}"
        room = f"{self.free} free, at most {self.most_on_one_card} on one card"
        if self.fits:
            return f"fits: all {self.replicas} machines ({room})"
        return f"only {self.machines} of {self.replicas} machines fit now ({room})"


def pool_fit(
    cards: Sequence[GpuProfile], *, gpu_type: str, count: int, replicas: int
) -> Fit | None:
    """Place the pool's machines as the reconciler would, each on the emptiest card with
    room for all its GPUs, on the cards as last listed. None: a pool without GPUs."""
    if not (gpu_type and count):
        return None
    matches = matching_cards(cards, gpu_type=gpu_type)
    if not matches:
        offered = "; ".join(str(o) for o in offers(cards)) or "no GPUs at all"
        return Fit(0, replicas, 0, 0, offered)
    free = [c.available_instances for c in matches]
    placed = 0
    for _ in range(replicas):
        emptiest = max(range(len(free)), key=lambda i: free[i])
        if free[emptiest] < count:
            break
        free[emptiest] -= count
        placed += 1
    total = sum(c.available_instances for c in matches)
    return Fit(placed, replicas, total, max(c.available_instances for c in matches), "")


# --- Kubernetes -------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeFlags:
    """What the Kubernetes mirror flagged: machines whose node never joined (or left), GPU
    nodes that advertise no GPU, nodes no machine owns."""

    machines_node_missing: int
    nodes_gpus_missing: int
    nodes_unowned: int

    @property
    def any(self) -> bool:
        return bool(self.machines_node_missing or self.nodes_gpus_missing or self.nodes_unowned)


def kube_flags(*, nodes: QuerySet[KubeNode], machines: QuerySet[Machine]) -> KubeFlags:
    """The flags raised among `nodes` and `machines`, in two queries."""
    counts = nodes.aggregate(
        gpus_missing=Count("pk", filter=Q(gpus_missing=True)),
        unowned=Count("pk", filter=Q(unowned_since__isnull=False)),
    )
    return KubeFlags(
        machines_node_missing=machines.filter(node_state__missing=True).count(),
        nodes_gpus_missing=counts["gpus_missing"],
        nodes_unowned=counts["unowned"],
    )


@dataclass(frozen=True)
class KubeObservation:
    """How well a cluster's Kubernetes was last observed."""

    age: timedelta | None  # since the last complete observation began; None: never
    stale: bool


def kube_observation(cluster: Cluster, *, now: datetime, interval: timedelta) -> KubeObservation:
    """The cluster's last complete node and pod listing, stale past two observe intervals."""
    last = cluster_observation(cluster).last_complete_at
    age = now - last if last else None
    return KubeObservation(age, age is None or age > 2 * interval)


PODS_SHOWN_PER_NODE = 8


@dataclass
class NodeRow:
    """A node (with `gpu_requested`, see `kube.selectors.kube_nodes_with_requests`) and
    the pods that hold or wait for its GPUs, the first few of them."""

    node: KubeNode
    gpu_pods: list[KubePod]
    more_gpu_pods: int

    @property
    def control_plane(self) -> bool:
        return any(label in self.node.labels for label in CONTROL_PLANE_LABELS)


def node_rows(nodes: Sequence[KubeNode], pods: QuerySet[KubePod]) -> list[NodeRow]:
    """The nodes with the pods of `pods` that request GPUs on them: one query, none when no
    node has GPUs requested."""
    by_node: dict[tuple[int, str], list[KubePod]] = defaultdict(list)
    asked = [n for n in nodes if getattr(n, "gpu_requested", 0)]
    if asked:
        rows = pods.filter(
            cluster__in={n.cluster_id for n in asked},
            node_name__in={n.name for n in asked},
            phase__in=ACTIVE_POD_PHASES,
            gpu_requests__gt=0,
        ).order_by("namespace", "name", "pk")
        for pod in rows:
            by_node[pod.cluster_id, pod.node_name].append(pod)
    found = []
    for node in nodes:
        held = by_node.get((node.cluster_id, node.name), [])
        found.append(
            NodeRow(node, held[:PODS_SHOWN_PER_NODE], max(0, len(held) - PODS_SHOWN_PER_NODE))
        )
    return found


# --- VMs that no machine owns -----------------------------------------------------------


@dataclass(frozen=True)
class OrphanVm:
    vm: VirtualMachine
    hourly_cost: Decimal  # its vCPUs and memory; its vGPUs are counted as reservations
    accrued_cost: Decimal  # since it was flagged


@dataclass
class OrphanVmTotal:
    location: Location
    count: int = 0
    hourly_cost: Decimal = Decimal(0)
    accrued_cost: Decimal = Decimal(0)
    oldest: datetime | None = None


@dataclass
class OrphanVms:
    shown: list[OrphanVm] = field(default_factory=list)
    totals: list[OrphanVmTotal] = field(default_factory=list)
    count: int = 0


def orphan_vms(
    *, vms: QuerySet[VirtualMachine], locations: Iterable[Location], now: datetime, shown: int
) -> OrphanVms:
    """VMs named by us that no machine owns, with what their vCPUs and memory cost at the
    location's prices (per hour and since flagged), per location, and the oldest `shown`
    of them. Their disks are not listed with the VM, so not priced."""
    by_id = {location.pk: location for location in locations}
    board = OrphanVms()
    totals: dict[int, OrphanVmTotal] = {}
    rows = vms.filter(orphaned_since__isnull=False, location_id__in=by_id).order_by(
        "orphaned_since", "pk"
    )
    for vm in rows.only(
        "location_id", "vm_id", "name", "status", "cloudspace_id", "vcpus", "memory_mib",
        "orphaned_since", "orphan_reason", "orphan_confirmations",
    ):  # fmt: skip
        location = by_id[vm.location_id]
        vm.location = location  # the prices are on the location already read
        hourly = hourly_price(vm.compute_monthly_price())
        assert vm.orphaned_since is not None
        hours = hours_between(vm.orphaned_since, now)
        total = totals.setdefault(location.pk, OrphanVmTotal(location))
        total.count += 1
        total.hourly_cost += hourly
        total.accrued_cost += hours * hourly
        total.oldest = total.oldest or vm.orphaned_since
        if len(board.shown) < shown:
            board.shown.append(OrphanVm(vm, hourly.quantize(CENT), (hours * hourly).quantize(CENT)))
    for total in totals.values():
        total.hourly_cost = total.hourly_cost.quantize(CENT)
        total.accrued_cost = total.accrued_cost.quantize(CENT)
    board.totals = sorted(totals.values(), key=lambda t: t.location.name)
    board.count = sum(t.count for t in board.totals)
    return board


# --- VMs made outside the control plane -----------------------------------------------


@dataclass(frozen=True)
class ForeignVm:
    vm: VirtualMachine
    hourly_cost: Decimal  # its vCPUs and memory, as the money figures price a VM
    since_seen_cost: Decimal  # since a listing first showed it


@dataclass
class ForeignVmTotal:
    location: Location
    count: int = 0
    hourly_cost: Decimal = Decimal(0)


@dataclass
class ForeignVms:
    shown: list[ForeignVm] = field(default_factory=list)
    totals: list[ForeignVmTotal] = field(default_factory=list)
    count: int = 0


def foreign_vms(
    *, vms: QuerySet[VirtualMachine], locations: Iterable[Location], now: datetime, shown: int
) -> ForeignVms:
    """VMs not named by us that no machine holds (`clusters.orphans.vms_not_ours`), as soon
    as a listing shows them: what they cost per hour at the location's prices, per
    location, and the newest `shown` of them. Never orphans (not ours to judge), but billed
    to the same account."""
    by_id = {location.pk: location for location in locations}
    board = ForeignVms()
    totals: dict[int, ForeignVmTotal] = {}
    rows = vms_not_ours(vms.filter(location_id__in=by_id)).order_by("-first_seen_at", "-pk")
    for vm in rows.only(
        "location_id", "vm_id", "name", "status", "cloudspace_id", "vcpus", "memory_mib",
        "first_seen_at", "changed_at",
    ):  # fmt: skip
        location = by_id[vm.location_id]
        vm.location = location  # the prices are on the location already read
        hourly = hourly_price(vm.compute_monthly_price())
        total = totals.setdefault(location.pk, ForeignVmTotal(location))
        total.count += 1
        total.hourly_cost += hourly
        if len(board.shown) < shown:
            hours = hours_between(vm.first_seen_at, now)
            board.shown.append(
                ForeignVm(vm, hourly.quantize(CENT), (hours * hourly).quantize(CENT))
            )
    for total in totals.values():
        total.hourly_cost = total.hourly_cost.quantize(CENT)
    board.totals = sorted(totals.values(), key=lambda t: t.location.name)
    board.count = sum(t.count for t in board.totals)
    return board
