"""The plan of a cluster: the whole diff between what it asks for and what was observed.

A plan is data, read from the database only. Each step names its objects by id and
carries every decision act will take: which machine rows to make, which card a machine's
vGPUs go on, which vGPUs and VMs a teardown or a cluster deletion releases. The dry run
(API, drift page) shows exactly this; act re-checks against whitesky only to resolve an
answer that was lost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Protocol, get_args

from django.db.models import Count, Prefetch, Q

from cloud.models import Location, VirtualMachine
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.selectors import pools_by_cluster
from gpus import naming
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import GpuUnavailable, gpu_profile_resolve

Phase = Machine.Phase
RState = VgpuReservation.State
VM_GONE = frozenset({"DELETED", "DESTROYED"})
LIVE_RESERVATION = (RState.RESERVING, RState.RESERVED, RState.ATTACHED, RState.RELEASING)
HELD = "billed_reservations"  # a machine's vGPUs, when read with it (_machines)

Action = Literal["create", "provision", "replace_vm", "teardown", "reclaim"]
ACTIONS: tuple[Action, ...] = get_args(Action)


@dataclass(frozen=True)
class Step:
    """One thing act will do. `machine_id` is None for `create` (the row is made by act)
    and for `reclaim` (the cluster's leftovers)."""

    action: Action
    target: str
    reason: str
    cluster_id: int
    pool_id: int | None = None
    machine_id: int | None = None
    card_id: str = ""
    """create/provision: the card the machine's missing vGPUs are reserved on."""
    reserve: tuple[str, ...] = ()
    """vGPU names to reserve and attach."""
    release: tuple[str, ...] = ()
    """vGPU names (with their ids) to release."""
    remove_vms: tuple[str, ...] = ()
    """VMs to stop and delete for good."""
    blocked: str = ""
    """Why act cannot do this yet (no room on any card, a location not wholly observed)."""

    def describe(self) -> str:
        parts = [f"{self.action} {self.target}: {self.reason}"]
        if self.reserve:
            parts.append(f"reserve {', '.join(self.reserve)} on card {self.card_id}")
        if self.release:
            parts.append(f"release {', '.join(self.release)}")
        if self.remove_vms:
            parts.append(f"remove VM {', '.join(self.remove_vms)}")
        if self.blocked:
            parts.append(f"blocked: {self.blocked}")
        return "; ".join(parts)


@dataclass
class CardBook:
    """The cards of a location with what is free on each: the last listing's count, less
    what we reserved (or asked for) since it began. Records come before calls, so a
    reserve in flight in another worker is already counted."""

    cards: list[GpuProfile]

    @classmethod
    def load(cls, location: Location) -> CardBook:
        cards = list(location.gpu_profiles.order_by("profile_id"))
        since = location.observation_started_at
        if since is not None:
            taken = dict(
                VgpuReservation.objects.filter(
                    location=location, created_at__gt=since, state__in=LIVE_RESERVATION
                )
                .values_list("gpu_id")
                .annotate(n=Count("pk"))
                .values_list("gpu_id", "n")
            )
            for card in cards:
                card.available_instances = max(
                    0, card.available_instances - taken.get(card.profile_id, 0)
                )
        return cls(cards)

    def resolve(
        self, pool: MachinePool, count: int, *, excluded: frozenset[str] = frozenset()
    ) -> str:
        """The card for `count` more vGPUs of the pool (GpuUnavailable when none fits)."""
        card = gpu_profile_resolve(
            [c for c in self.cards if c.profile_id not in excluded],
            location=pool.site.location.name,
            count=count,
            gpu_type=pool.gpu_type,
            profile_id=pool.gpu_profile_id,
        )
        return card.profile_id

    def take(self, card_id: str, count: int) -> None:
        for card in self.cards:
            if card.profile_id == card_id:
                card.available_instances -= count


@dataclass(frozen=True)
class Call:
    """One call a step makes outside: the service, its verb and the object it names."""

    service: Literal["kubernetes", "whitesky"]
    verb: str
    target: str

    def __str__(self) -> str:
        return f"{self.service} {self.verb} {self.target}"


class PlannedStep(Protocol):
    """A step of a registered planner (node labels, the GPU add-on, NIC reclaim)."""

    @property
    def kind(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def reason(self) -> str: ...
    def describe(self) -> str: ...
    def calls(self) -> tuple[Call, ...]: ...


Planner = Callable[[Cluster], Sequence[PlannedStep]]
PLANNERS: list[tuple[Planner, tuple[str, ...]]] = []


def planner_register(planner: Planner, *, kinds: tuple[str, ...]) -> None:
    """Add a planner whose steps (of these kinds) every cluster plan lists after the
    machines' steps. Apps above `clusters` register theirs in `AppConfig.ready()`."""
    if all(known is not planner for known, _ in PLANNERS):
        PLANNERS.append((planner, kinds))


def planned_kinds() -> tuple[str, ...]:
    """Every kind of step a plan may show: the machines' actions, then the planners'."""
    return ACTIONS + tuple(kind for _, kinds in PLANNERS for kind in kinds)


@dataclass
class ClusterPlan:
    cluster: Cluster
    steps: list[Step] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.steps)

    @cached_property
    def planned(self) -> list[PlannedStep]:
        """The registered planners' steps, planned when asked for (the dry run): their own
        tasks act on them, not the machines' pass."""
        return [step for planner, _ in PLANNERS for step in planner(self.cluster)]

    @property
    def shown(self) -> list[Step | PlannedStep]:
        """Every step, as the dry run shows them."""
        return [*self.steps, *self.planned]


def gpus_held(machine: Machine) -> list[VgpuReservation]:
    if machine.pk is None:
        return []  # a machine the plan would make
    held: list[VgpuReservation] | None = getattr(machine, HELD, None)
    if held is not None:
        return held  # read with the machine, for the whole cluster at once (_machines)
    return list(
        VgpuReservation.objects.filter(machine=machine, state__in=LIVE_RESERVATION).order_by(
            "owner_index", "pk"
        )
    )


def machine_gpu_decision(
    machine: Machine, books: dict[int, CardBook]
) -> tuple[str, tuple[str, ...], str]:
    """(card, names to reserve, why not) for the vGPUs the machine lacks."""
    pool = machine.pool
    if not pool.wants_gpus:
        return "", (), ""
    location = pool.site.location
    held = {row.owner_index for row in gpus_held(machine)}
    missing = tuple(machine.vgpu_name(n) for n in range(pool.gpu_count) if n not in held)
    if not missing:
        return "", (), ""
    if not location.observation_complete:
        return "", missing, f"{location.name} is not completely observed yet"
    book = books.setdefault(location.pk, CardBook.load(location))
    try:
        card_id = book.resolve(pool, len(missing))
    except GpuUnavailable as exc:
        return "", missing, str(exc)
    book.take(card_id, len(missing))
    return card_id, missing, ""


def vm_vanished(machine: Machine, site: ClusterSite, listed: VirtualMachine | None) -> bool:
    """Whether the machine's VM is gone, judged only from a whole listing of its cloudspace
    that began after the VM was known to exist."""
    location = site.location
    if machine.vm_id is None or machine.vm_created_at is None or site.observation_error:
        return False
    began = location.observation_started_at
    if began is None or began <= machine.vm_created_at:
        return False
    return listed is None or listed.status in VM_GONE


def machine_teardown_step(machine: Machine, reason: str) -> Step:
    pool = machine.pool
    held = gpus_held(machine)
    return Step(
        "teardown",
        machine.name,
        reason,
        cluster_id=pool.cluster_id,
        pool_id=pool.pk,
        machine_id=machine.pk,
        release=tuple(f"{row.name} ({row.vgpu_id or 'id unknown'})" for row in held),
        remove_vms=(f"{machine.vm_name} ({machine.vm_id})",) if machine.vm_id else (),
    )


def machine_step(
    machine: Machine, books: dict[int, CardBook], vms: dict[tuple[int, int], VirtualMachine]
) -> Step | None:
    """The step one existing machine needs, or None when it is as asked."""
    pool = machine.pool
    if machine.delete_requested or machine.phase == Phase.DELETING:
        return machine_teardown_step(machine, "deletion requested")
    site = pool.site
    action: Action = "provision"
    reason = f"phase {machine.phase}"
    remove_vms: tuple[str, ...] = ()
    if machine.phase == Phase.RUNNING:
        listed = vms.get((site.location_id, machine.vm_id or 0))
        if not vm_vanished(machine, site, listed):
            return None
        action = "replace_vm"
        reason = f"its VM {machine.vm_id} is not in the listing of {site.cloudspace_id}"
        remove_vms = (f"{machine.vm_name} ({machine.vm_id})",)
    card_id, reserve, blocked = machine_gpu_decision(machine, books)
    return Step(
        action,
        machine.name,
        reason,
        cluster_id=pool.cluster_id,
        pool_id=pool.pk,
        machine_id=machine.pk,
        card_id=card_id,
        reserve=reserve,
        remove_vms=remove_vms,
        blocked=blocked,
    )


def _scale_down_order(machine: Machine) -> tuple[bool, int]:
    # Machines that are not running go first, then the newest.
    return (machine.phase == Phase.RUNNING, -machine.index)


def cluster_plan(cluster: Cluster) -> ClusterPlan:
    """Everything the next pass would do for the cluster, from the database only."""
    plan = ClusterPlan(cluster)
    books: dict[int, CardBook] = {}
    if cluster.state == Cluster.State.DELETING:
        for machine in _machines(Q(pool__cluster=cluster)):
            plan.steps.append(machine_teardown_step(machine, "cluster is being deleted"))
        plan.steps.append(cluster_reclaim_step(cluster))
        return plan
    machines = _machines(Q(pool__cluster=cluster))
    vms = _observed_vms(cluster, machines)
    by_pool: dict[int, list[Machine]] = defaultdict(list)
    for machine in machines:
        by_pool[machine.pool_id].append(machine)
    pools = cluster.pools.select_related("site__location", "cluster").order_by("name")
    for pool in pools:
        members = by_pool.get(pool.pk, [])
        live = [m for m in members if not (m.delete_requested or m.phase == Phase.DELETING)]
        surplus = sorted(live, key=_scale_down_order)[: max(0, len(live) - pool.replicas)]
        for machine in members:
            if machine in surplus:
                plan.steps.append(
                    machine_teardown_step(machine, f"pool {pool.name} scaled to {pool.replicas}")
                )
            elif step := machine_step(machine, books, vms):
                plan.steps.append(step)
        for offset in range(pool.replicas - len(live)):
            index = pool.next_index + offset
            name = f"{pool.name}-{index}"
            probe = Machine(pool=pool, name=name, index=index)
            card_id, reserve, blocked = machine_gpu_decision(probe, books)
            plan.steps.append(
                Step(
                    "create",
                    name,
                    f"pool {pool.name} has {len(live)} of {pool.replicas} machines",
                    cluster_id=cluster.pk,
                    pool_id=pool.pk,
                    card_id=card_id,
                    reserve=reserve,
                    blocked=blocked,
                )
            )
    return plan


def cluster_reclaim_step(cluster: Cluster) -> Step:
    """What a cluster deletion removes after its machines: every VM and vGPU that carries
    its name, as last observed (act lists again before it ends the deletion)."""
    is_ours = owned_by(cluster)
    locations = Location.objects.filter(account=cluster.account_id)
    vms = VirtualMachine.objects.filter(location__in=locations, name__startswith=naming.PREFIX)
    rows = VgpuReservation.objects.filter(
        location__in=locations,
        name__startswith=naming.PREFIX,
        state__in=[RState.RESERVED, RState.ATTACHED, RState.RELEASING],
    )
    return Step(
        "reclaim",
        cluster.name,
        "VMs and vGPUs named for the cluster, in every location of its account",
        cluster_id=cluster.pk,
        release=tuple(f"{r.name} ({r.vgpu_id})" for r in rows.order_by("name") if is_ours(r.name)),
        remove_vms=tuple(
            f"{vm.name} ({vm.vm_id})" for vm in vms.order_by("name") if is_ours(vm.name)
        ),
    )


def owned_by(cluster: Cluster, machine: str | None = None) -> OwnerTest:
    """Whether a VM or vGPU name belongs to the cluster (and to `machine`, if given)."""
    return OwnerTest(pools_by_cluster(cluster.account_id), cluster.name, machine)


@dataclass(frozen=True)
class OwnerTest:
    pools_by_cluster: dict[str, set[str]]
    cluster: str
    machine: str | None

    def __call__(self, name: str) -> bool:
        owner = naming.owner_parse(name, self.pools_by_cluster)
        return (
            owner is not None
            and owner.cluster == self.cluster
            and (self.machine is None or owner.machine == self.machine)
        )


def _machines(where: Q) -> list[Machine]:
    """The machines, each with the vGPUs it holds: one query for them all, not one per
    machine (the dashboard shows the plan of a cluster of hundreds)."""
    held = VgpuReservation.objects.filter(state__in=LIVE_RESERVATION).order_by("owner_index", "pk")
    machines = list(
        Machine.objects.filter(where)
        .prefetch_related(Prefetch("reservations", queryset=held, to_attr=HELD))
        .order_by("pool__name", "index")
    )
    # One pool object per pool, shared by its machines, not one copy (with its site,
    # location and cluster) per machine.
    pools = MachinePool.objects.filter(pk__in={m.pool_id for m in machines}).select_related(
        "site__location", "cluster"
    )
    by_id = {pool.pk: pool for pool in pools}
    for machine in machines:
        machine.pool = by_id[machine.pool_id]
    return machines


def _observed_vms(
    cluster: Cluster, machines: list[Machine]
) -> dict[tuple[int, int], VirtualMachine]:
    """The listed VMs of the machines, by (location, VM id)."""
    locations = ClusterSite.objects.filter(cluster=cluster).values("location")
    vm_ids = [m.vm_id for m in machines if m.vm_id is not None]
    return {
        (vm.location_id, vm.vm_id): vm
        for vm in VirtualMachine.objects.filter(location__in=locations, vm_id__in=vm_ids)
    }
