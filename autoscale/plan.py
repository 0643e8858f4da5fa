"""The pool autoscaler's plan for a cluster: pools with autoscale on follow their GPU pods.

Read from the database only, what observe mirrored, and only from complete observations:
nothing is planned for a cluster whose last Kubernetes listing was partial, nor for a pool
whose location's last whitesky listing was.

**Up.** The GPU pods that no Ready, schedulable node can take because of GPUs (the pending
reasons no-node, no-node-of-type and all-requested of `kube.pending_pods`; a pod with GPUs free
somewhere waits on CPU, memory, taints or affinity, and counts for nothing) are packed,
largest request first (first-fit decreasing), onto what is coming already: machines made
or being made whose node is not Ready with GPUs yet, machines a pool is to have and has not
made yet, and a node being drained (kept, and uncordoned). What is left opens machines in
the pools that make the pod's type and whose machines hold its request, below their max,
where the location has a card with room for a machine (the machines' own fit check,
`clusters.plan.CardBook`): the cheapest per GPU the waiting pods would use first (the
location's prices, and no machine bigger than they fill), then the location with the most
free. From zero too: a pool's type and count are known without a
node. A second pass with nothing changed finds the first one's machines coming and decides
nothing. Pods left over are a shortfall ("nvidia-a100 x 2: 3 pods pending: nl 0 free, be
0 free"), told once by a notice.

**Down.** A machine whose GPUs no pending or running pod placed on its node requests is
unneeded from the pass that first sees it so. Once it has been for AUTOSCALE_IDLE, in a
listing begun after that, not within AUTOSCALE_DOWN_DELAY_AFTER_UP of its pool's last
growth, and while the pool stays at or above its min with those draining gone, it is drained:
its node cordoned, then its pods (DaemonSets' and static pods aside) evicted through the
Eviction API, where a PodDisruptionBudget's 429 means wait, never delete. When a listing
begun after the drain started shows none of its pods left, the pool's target is lowered by
one and the machines' plan tears this machine down first, releasing its vGPUs. Idle
machines of the most expensive location go first; several drain at once, as
cluster-autoscaler removes empty nodes in bulk. A pod that asks for the node's GPUs
before then keeps it: the drain ends and the node is uncordoned.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from autoscale.models import GpuShortfall
from billing.costs import pool_machine_hourly
from capvco_web.plans import Call
from clusters.models import Cluster, Machine, MachineDrain, MachinePool
from clusters.plan import CardBooks
from gpus.resolve import CAPACITY_WAIT, GpuUnavailable, matching_cards
from kube.models import ClusterObservation, KubeNode, KubePod
from kube.pending_pods import (
    ALL_REQUESTED,
    NO_NODE,
    NO_NODE_OF_TYPE,
    cluster_rooms,
    pending_pods_explained,
    unscheduled_gpu_pods,
)
from kube.selectors import ACTIVE_POD_PHASES, kube_nodes_with_requests

GROW = "pool_grow"
UNNEEDED = "machine_unneeded"
KEEP = "machine_keep"
DRAIN = "node_drain"
EVICT = "pod_evict"
RELEASE = "machine_release"
KINDS = (GROW, UNNEEDED, KEEP, DRAIN, EVICT, RELEASE)
# A cluster with no node at all (GPU pools at 0 and nothing else) waits for GPU nodes too.
TEXT_KEPT = GpuShortfall._meta.get_field("text").max_length  # what its row keeps of a text
TRIGGERS = frozenset({NO_NODE, NO_NODE_OF_TYPE, ALL_REQUESTED})
Phase = MachineDrain.Phase


def _node_path(node: str) -> str:
    return f"/api/v1/nodes/{node}"


@dataclass(frozen=True, kw_only=True)
class PoolGrow:
    """More machines for a pool: its target raised; the machines' plan makes them."""

    cluster_id: int
    pool_id: int
    pool: str
    before: int
    after: int
    reason: str

    @property
    def kind(self) -> str:
        return GROW

    @property
    def target(self) -> str:
        return f"pool {self.pool}"

    def describe(self) -> str:
        return f"grow {self.target} from {self.before} to {self.after} machines ({self.reason})"

    def calls(self) -> tuple[Call, ...]:
        return ()  # the machines' plan makes them, after the target is written


@dataclass(frozen=True, kw_only=True)
class MachineUnneeded:
    """A machine whose GPUs no pod requests: its idle clock starts."""

    cluster_id: int
    machine_id: int
    machine: str
    node: str
    reason: str

    @property
    def kind(self) -> str:
        return UNNEEDED

    @property
    def target(self) -> str:
        return f"machine {self.machine}"

    def describe(self) -> str:
        return f"{self.target} unneeded from now ({self.reason})"

    def calls(self) -> tuple[Call, ...]:
        return ()


@dataclass(frozen=True, kw_only=True)
class MachineKeep:
    """A machine wanted again before it was drained: its drain ends (its node uncordoned
    when the drain had cordoned it)."""

    cluster_id: int
    machine_id: int
    machine: str
    node: str
    uncordon: bool
    reason: str

    @property
    def kind(self) -> str:
        return KEEP

    @property
    def target(self) -> str:
        return f"machine {self.machine}"

    def describe(self) -> str:
        then = f", node {self.node} uncordoned" if self.uncordon else ""
        return f"keep {self.target}{then} ({self.reason})"

    def calls(self) -> tuple[Call, ...]:
        if not self.uncordon:
            return ()
        return (Call("PATCH", _node_path(self.node), service="kubernetes"),)


@dataclass(frozen=True, kw_only=True)
class NodeDrain:
    """The drain of an unneeded machine begins: its node cordoned."""

    cluster_id: int
    pool_id: int
    machine_id: int
    machine: str
    node: str
    reason: str

    @property
    def kind(self) -> str:
        return DRAIN

    @property
    def target(self) -> str:
        return f"node {self.node}"

    def describe(self) -> str:
        return f"cordon {self.target} of machine {self.machine} and drain it ({self.reason})"

    def calls(self) -> tuple[Call, ...]:
        return (Call("PATCH", _node_path(self.node), service="kubernetes"),)


@dataclass(frozen=True, kw_only=True)
class PodEvict:
    """One pod of a draining node evicted, as its PodDisruptionBudgets allow."""

    cluster_id: int
    machine_id: int
    node: str
    namespace: str
    name: str
    reason: str

    @property
    def kind(self) -> str:
        return EVICT

    @property
    def target(self) -> str:
        return f"pod {self.namespace}/{self.name}"

    def describe(self) -> str:
        return f"evict {self.target} from node {self.node} ({self.reason})"

    def calls(self) -> tuple[Call, ...]:
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/eviction"
        return (Call("POST", path, service="kubernetes"),)


@dataclass(frozen=True, kw_only=True)
class MachineRelease:
    """A drained machine goes: its pool's target lowered by one, this machine first."""

    cluster_id: int
    pool_id: int
    pool: str
    machine_id: int
    machine: str
    before: int
    after: int
    reason: str

    @property
    def kind(self) -> str:
        return RELEASE

    @property
    def target(self) -> str:
        return f"machine {self.machine}"

    def describe(self) -> str:
        return (
            f"tear down {self.target}: pool {self.pool} from {self.before} to {self.after} "
            f"machines ({self.reason})"
        )

    def calls(self) -> tuple[Call, ...]:
        return ()  # the machines' plan tears it down, after the target is written


AutoscaleStep = PoolGrow | MachineUnneeded | MachineKeep | NodeDrain | PodEvict | MachineRelease
AUTOSCALE_STEPS = (PoolGrow, MachineUnneeded, MachineKeep, NodeDrain, PodEvict, MachineRelease)


@dataclass(frozen=True)
class Shortfall:
    """GPU pods of one shape that no pool can take now, and why, per pool of their type."""

    gpu_type: str
    gpus: int
    pods: int
    oldest: datetime
    text: str


@dataclass
class AutoscalePlan:
    cluster_id: int
    steps: list[AutoscaleStep] = field(default_factory=list)
    shortfalls: list[Shortfall] = field(default_factory=list)
    skipped: str = ""
    """Why nothing is planned (an incomplete observation); shortfalls are then unknown."""
    oldest_pending: datetime | None = None
    """When the oldest GPU pod that waits because of GPUs was first seen."""


@dataclass
class _Bin:
    """Room for GPU pods on one machine: coming, kept, or opened by this plan."""

    pool: MachinePool
    types: frozenset[str]
    free: int
    keep: MachineKeep | None = None

    def fits(self, pod: KubePod) -> bool:
        return self.free >= pod.gpu_requests and (not pod.gpu_type or pod.gpu_type in self.types)


def autoscale_steps(cluster: Cluster) -> list[AutoscaleStep]:
    """The steps alone (the dry run's planner)."""
    return autoscale_plan(cluster, now=timezone.now()).steps


def autoscale_plan(cluster: Cluster, *, now: datetime) -> AutoscalePlan:
    plan = AutoscalePlan(cluster.pk)
    pools = list(cluster.pools.select_related("site__location", "target").order_by("name"))
    if cluster.state != Cluster.State.ACTIVE or not any(p.autoscale_enabled for p in pools):
        return plan
    observation = ClusterObservation.objects.filter(cluster=cluster).first()
    if observation is None or not observation.complete or observation.started_at is None:
        plan.skipped = "the cluster's last Kubernetes listing was not complete"
        return plan
    listed_at = observation.started_at
    machines = list(
        Machine.objects.filter(pool__cluster=cluster)
        .select_related("drain", "deletion")
        .order_by("pool__name", "index")
    )
    by_pk = {pool.pk: pool for pool in pools}
    for machine in machines:
        machine.pool = by_pk[machine.pool_id]
    nodes = {
        node.machine_id: node
        for node in kube_nodes_with_requests(
            KubeNode.objects.filter(cluster=cluster, machine__isnull=False)
        )
    }
    types = {room.name: room.types for room in cluster_rooms({cluster.pk})[cluster.pk].pools}
    books = CardBooks()
    targets = {pool.pk: pool.effective_replicas for pool in pools}

    coming, kept = _room_coming(pools, machines, nodes, types, books)
    pending = [
        found.pod
        for found in pending_pods_explained(
            unscheduled_gpu_pods(KubePod.objects.filter(cluster=cluster)),
            KubeNode.objects.filter(cluster=cluster),
        )
        if found.why.code in TRIGGERS
    ]
    plan.oldest_pending = min((pod.first_seen_at for pod in pending), default=None)
    kept_steps, grown, short = _pack(pending, coming, kept, pools, types, books, targets)
    plan.steps += kept_steps
    for pool in pools:
        if grown.get(pool.pk):
            pods = grown[pool.pk]
            plan.steps.append(
                PoolGrow(
                    cluster_id=cluster.pk,
                    pool_id=pool.pk,
                    pool=pool.name,
                    before=targets[pool.pk] - len(pods),
                    after=targets[pool.pk],
                    reason=_grow_reason(pool, pods),
                )
            )
    plan.shortfalls = _shortfalls(short, pools, types, books, targets)
    kept_ids = {step.machine_id for step in kept_steps}
    plan.steps += _down(cluster, pools, machines, nodes, kept_ids, grown, listed_at, now)
    return plan


def _usable(node: KubeNode | None) -> bool:
    return node is not None and node.ready and node.gpu_allocatable > 0


def _room_coming(
    pools: list[MachinePool],
    machines: list[Machine],
    nodes: dict[int | None, KubeNode],
    types: dict[str, frozenset[str]],
    books: CardBooks,
) -> tuple[list[_Bin], list[tuple[_Bin, Machine, KubeNode]]]:
    """The GPU room on its way (machines without a usable node yet, and those a pool is to
    have and lacks: their cards taken from the books), and the nodes being drained."""
    coming: list[_Bin] = []
    kept: list[tuple[_Bin, Machine, KubeNode]] = []
    members: dict[int, list[Machine]] = defaultdict(list)
    for machine in machines:
        members[machine.pool_id].append(machine)
    for pool in pools:
        if not pool.wants_gpus:
            continue
        made = [
            m
            for m in members[pool.pk]
            if not (m.deletion_asked or m.phase == Machine.Phase.DELETING)
        ]
        pool_types = types.get(pool.name, frozenset())
        for machine in made:
            node = nodes.get(machine.pk)
            drain = machine.drain_now
            if drain is not None and drain.phase == Phase.DRAINED:
                continue  # on its way out: its pool's target no longer counts it
            if _usable(node):
                assert node is not None
                if node.unschedulable and drain is not None and drain.phase == Phase.DRAINING:
                    free = node.gpu_allocatable - node.gpu_requested  # type: ignore[attr-defined]
                    kept.append((_Bin(pool, pool_types, max(free, 0)), machine, node))
                continue
            if machine.phase == Machine.Phase.FAILED or machine.failure_message.startswith(
                CAPACITY_WAIT
            ):
                continue  # not coming: failed, or waiting for a card
            coming.append(_Bin(pool, pool_types, pool.gpu_count))
        location = pool.site.location
        for _ in range(max(0, pool.effective_replicas - len(made))):
            if location.observation_complete:
                book = books.of(location)
                try:
                    book.take(book.resolve(pool, pool.gpu_count), pool.gpu_count)
                except GpuUnavailable:
                    continue  # the machines' plan will wait for a card: not coming
            coming.append(_Bin(pool, pool_types, pool.gpu_count))
    return coming, kept


def _pack(
    pending: list[KubePod],
    coming: list[_Bin],
    kept: list[tuple[_Bin, Machine, KubeNode]],
    pools: list[MachinePool],
    types: dict[str, frozenset[str]],
    books: CardBooks,
    targets: dict[int, int],
) -> tuple[list[MachineKeep], dict[int, list[KubePod]], list[KubePod]]:
    """First-fit decreasing: each pod, largest request first, onto the first room that
    holds it (coming, then a draining node kept, then a new machine of the best pool).
    Answers the keeps, the pods each pool grows for (one entry per new machine's first
    pod), and the pods left over. `targets` is raised for each machine opened."""
    bins = list(coming)
    keeps: list[MachineKeep] = []
    grown: dict[int, list[KubePod]] = defaultdict(list)
    short: list[KubePod] = []
    ordered = sorted(pending, key=lambda p: (-p.gpu_requests, p.first_seen_at, p.pk))
    for n, pod in enumerate(ordered):
        room = next((b for b in bins if b.fits(pod)), None)
        if room is None:
            found = next((k for k in kept if k[0].fits(pod)), None)
            if found is not None:
                kept.remove(found)
                room, machine, node = found
                room.keep = MachineKeep(
                    cluster_id=machine.pool.cluster_id,
                    machine_id=machine.pk,
                    machine=machine.name,
                    node=node.name,
                    uncordon=True,
                    reason=f"pod {pod.namespace}/{pod.name} asks for {_shape(pod)}",
                )
                keeps.append(room.keep)
                bins.append(room)
        if room is None:
            pool = _best_pool(pod, ordered[n:], pools, types, books, targets)
            if pool is not None:
                targets[pool.pk] += 1
                grown[pool.pk].append(pod)
                room = _Bin(pool, types.get(pool.name, frozenset()), pool.gpu_count)
                bins.append(room)
        if room is None:
            short.append(pod)
            continue
        room.free -= pod.gpu_requests
    return keeps, grown, short


def _best_pool(
    pod: KubePod,
    waiting: list[KubePod],
    pools: list[MachinePool],
    types: dict[str, frozenset[str]],
    books: CardBooks,
    targets: dict[int, int],
) -> MachinePool | None:
    """The pool to grow for the pod: the cheapest per GPU the pods still waiting would use
    on its new machine (the location's prices, and no machine bigger than they fill: a
    4-GPU machine for one 1-GPU pod pays for 3 idle ones), then the location with the most
    free; its card taken from the books. None: no pool of its type can take it now."""
    ranked: list[tuple[Decimal, int, str, MachinePool]] = []
    for pool in pools:
        if not _can_hold(pool, pod, types) or targets[pool.pk] >= pool.autoscale_max:
            continue
        location = pool.site.location
        if not location.observation_complete:
            continue
        free = _free(books, pool)
        if free < pool.gpu_count:
            continue
        fills = sum(other.gpu_requests for other in waiting if _can_hold(pool, other, types))
        per_gpu = pool_machine_hourly(pool) / min(pool.gpu_count, max(fills, 1))
        ranked.append((per_gpu, -free, pool.name, pool))
    for *_, pool in sorted(ranked, key=lambda r: r[:3]):
        book = books.of(pool.site.location)
        try:
            book.take(book.resolve(pool, pool.gpu_count), pool.gpu_count)
        except GpuUnavailable:
            continue  # free in sum, but on no one card
        return pool
    return None


def _can_hold(pool: MachinePool, pod: KubePod, types: dict[str, frozenset[str]]) -> bool:
    return (
        pool.autoscale_enabled
        and pool.gpu_count >= pod.gpu_requests
        and (not pod.gpu_type or pod.gpu_type in types.get(pool.name, frozenset()))
    )


def _free(books: CardBooks, pool: MachinePool) -> int:
    """The vGPUs of the pool's type free at its location, as the books stand."""
    picker = books.of(pool.site.location).picker
    cards = matching_cards(picker.cards, gpu_type=pool.gpu_type, profile_id=pool.gpu_profile_id)
    return sum(max(picker.free(card.profile_id), 0) for card in cards)


def _shape(pod: KubePod) -> str:
    return f"{pod.gpu_type or 'any GPU'} x {pod.gpu_requests}"


def _grow_reason(pool: MachinePool, pods: list[KubePod]) -> str:
    shapes = sorted({_shape(pod) for pod in pods})
    return (
        f"{len(pods)} new machine{'s' if len(pods) != 1 else ''} of {pool.gpu_count} GPU"
        f"{'s' if pool.gpu_count != 1 else ''} for pending pods asking {', '.join(shapes)}; "
        f"{pool.site.location.name} at {pool_machine_hourly(pool):.4f} "
        f"{pool.site.location.currency}/h a machine"
    )


def _shortfalls(
    short: list[KubePod],
    pools: list[MachinePool],
    types: dict[str, frozenset[str]],
    books: CardBooks,
    targets: dict[int, int],
) -> list[Shortfall]:
    """The pods left over, by shape, with why each autoscaled pool of their type cannot
    take them. Pods of a type no autoscaled pool makes are not the autoscaler's to tell
    (the pending-pod list says no pool makes them)."""
    shapes: dict[tuple[str, int], list[KubePod]] = defaultdict(list)
    for pod in short:
        shapes[(pod.gpu_type, pod.gpu_requests)].append(pod)
    found = []
    for (gpu_type, gpus), pods in sorted(shapes.items()):
        whys = []
        for pool in pools:
            if not pool.autoscale_enabled or (
                gpu_type and gpu_type not in types.get(pool.name, frozenset())
            ):
                continue
            location = pool.site.location
            if pool.gpu_count < gpus:
                whys.append(f"pool {pool.name} makes {pool.gpu_count} per machine")
            elif targets[pool.pk] >= pool.autoscale_max:
                whys.append(f"pool {pool.name} at its max {pool.autoscale_max}")
            elif not location.observation_complete:
                continue  # unknown, not short: the next complete listing tells
            else:
                whys.append(f"{location.name} {_free(books, pool)} free")
        if not whys:
            continue
        label = gpu_type or "any GPU"
        text = (
            f"{label} x {gpus}: {len(pods)} pod{'s' if len(pods) != 1 else ''} pending: "
            + ", ".join(dict.fromkeys(whys))
        )
        oldest = min(pod.first_seen_at for pod in pods)
        found.append(Shortfall(gpu_type, gpus, len(pods), oldest, text[:TEXT_KEPT]))
    return found


def _down(
    cluster: Cluster,
    pools: list[MachinePool],
    machines: list[Machine],
    nodes: dict[int | None, KubeNode],
    kept: set[int],
    grown: dict[int, list[KubePod]],
    listed_at: datetime,
    now: datetime,
) -> list[AutoscaleStep]:
    steps: list[AutoscaleStep] = []
    by_pool: dict[int, list[Machine]] = defaultdict(list)
    for machine in machines:
        by_pool[machine.pool_id].append(machine)
    drains: list[tuple[Decimal, datetime, NodeDrain]] = []
    evictable = _evictable_pods(cluster, machines)
    for pool in pools:
        if not pool.autoscale_enabled:
            continue
        members = by_pool[pool.pk]
        complete = pool.site.location.observation_complete
        # Several of the pool's machines drained in one pass: each lowers the target by one.
        before = pool.effective_replicas
        for machine in members:
            if machine.pk in kept or machine.deletion_asked:
                continue
            node = nodes.get(machine.pk)
            found = _machine_down(cluster, machine, node, evictable, listed_at, before=before)
            before -= sum(1 for step in found if isinstance(step, MachineRelease))
            steps += found
        draining = sum(1 for m in members if _drain_phase(m) == Phase.DRAINING)
        decided = pool.decided
        quiet = (
            decided is None
            or decided.scaled_up_at is None
            or (now - decided.scaled_up_at >= settings.AUTOSCALE_DOWN_DELAY_AFTER_UP)
        )
        # Machines that may still go: those above the min, less those draining already.
        room = pool.effective_replicas - draining - pool.autoscale_min
        if not (complete and quiet and room > 0 and not grown.get(pool.pk)):
            continue
        idle = [
            m
            for m in members
            if _drain_phase(m) == Phase.UNNEEDED
            and m.drain.unneeded_since <= now - settings.AUTOSCALE_IDLE
            and m.drain.unneeded_since <= listed_at
            and m.phase == Machine.Phase.RUNNING
            and not m.deletion_asked
            and _usable(nodes.get(m.pk))
        ]
        for machine in sorted(idle, key=lambda m: (m.drain.unneeded_since, -m.index))[:room]:
            node = nodes[machine.pk]
            idle_for = round((now - machine.drain.unneeded_since).total_seconds() / 60)
            step = NodeDrain(
                cluster_id=cluster.pk,
                pool_id=pool.pk,
                machine_id=machine.pk,
                machine=machine.name,
                node=node.name,
                reason=f"its {pool.gpu_count} GPU{'s' if pool.gpu_count != 1 else ''} "
                f"requested by no pod for {idle_for} min; pool {pool.name} above its min "
                f"{pool.autoscale_min}",
            )
            drains.append((pool_machine_hourly(pool), machine.drain.unneeded_since, step))
    # The most expensive location's first, then the longest idle.
    steps += [step for *_, step in sorted(drains, key=lambda d: (-d[0], d[1]))]
    return steps


def _drain_phase(machine: Machine) -> str | None:
    drain = machine.drain_now
    return None if drain is None else drain.phase


def _evictable_pods(cluster: Cluster, machines: list[Machine]) -> dict[str, list[KubePod]]:
    """The pods a drain evicts (DaemonSets' and static pods aside) on each node being
    drained, by node name: one query for them all."""
    draining = {
        m.drain_now.node_name
        for m in machines
        if m.drain_now is not None and m.drain_now.phase == Phase.DRAINING
    }
    found: dict[str, list[KubePod]] = defaultdict(list)
    if draining:
        pods = KubePod.objects.filter(
            cluster=cluster, node_name__in=draining, phase__in=ACTIVE_POD_PHASES, daemon=False
        ).order_by("namespace", "name")
        for pod in pods:
            found[pod.node_name].append(pod)
    return found


def _machine_down(
    cluster: Cluster,
    machine: Machine,
    node: KubeNode | None,
    evictable: dict[str, list[KubePod]],
    listed_at: datetime,
    *,
    before: int,
) -> list[AutoscaleStep]:
    """One machine's scale-down bookkeeping: its idle clock started or ended, its drain
    carried on (evictions) or finished (released: its pool from `before` machines to one
    fewer)."""
    drain = machine.drain_now
    requested = getattr(node, "gpu_requested", 0) if node is not None else 0
    name = node.name if node is not None else ""
    if drain is None:
        if _usable(node) and not requested and machine.phase == Machine.Phase.RUNNING:
            assert node is not None
            return [
                MachineUnneeded(
                    cluster_id=cluster.pk,
                    machine_id=machine.pk,
                    machine=machine.name,
                    node=node.name,
                    reason=f"no pending or running pod requests the GPUs of node {node.name}",
                )
            ]
        return []
    if drain.phase == Phase.DRAINED:
        return []
    if requested:
        return [
            MachineKeep(
                cluster_id=cluster.pk,
                machine_id=machine.pk,
                machine=machine.name,
                node=name or drain.node_name,
                uncordon=drain.phase == Phase.DRAINING,
                reason=f"a pod requests {requested} of its GPUs again",
            )
        ]
    if drain.phase == Phase.UNNEEDED:
        if not _usable(node):
            return [
                MachineKeep(
                    cluster_id=cluster.pk,
                    machine_id=machine.pk,
                    machine=machine.name,
                    node=name or drain.node_name,
                    uncordon=False,
                    reason="its node is not Ready with GPUs: its GPUs are not idle, they are "
                    "not there",
                )
            ]
        return []
    # Draining: evict what is left; done once a listing begun after the drain started
    # shows nothing left on the node.
    assert drain.drain_started_at is not None
    listed_since = listed_at > drain.drain_started_at
    if node is not None and not node.unschedulable and listed_since:
        return [  # recorded, then the worker died before the cordon: cordon it now
            NodeDrain(
                cluster_id=cluster.pk,
                pool_id=machine.pool_id,
                machine_id=machine.pk,
                machine=machine.name,
                node=node.name,
                reason="its drain began and a listing since shows it schedulable",
            )
        ]
    pods = evictable.get(drain.node_name, [])
    if pods:
        return [
            PodEvict(
                cluster_id=cluster.pk,
                machine_id=machine.pk,
                node=drain.node_name,
                namespace=pod.namespace,
                name=pod.name,
                reason=f"node {drain.node_name} is being drained",
            )
            for pod in pods
        ]
    if not listed_since:
        return []  # no listing since the drain began: it may not show everything yet
    pool = machine.pool
    return [
        MachineRelease(
            cluster_id=cluster.pk,
            pool_id=pool.pk,
            pool=pool.name,
            machine_id=machine.pk,
            machine=machine.name,
            before=before,
            after=before - 1,
            reason=f"node {drain.node_name} drained, its GPUs unneeded since "
            f"{drain.unneeded_since:%Y-%m-%d %H:%M} UTC",
        )
    ]
