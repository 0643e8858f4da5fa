"""The plan of a cluster: the whole diff between what it asks for and what was observed.

A plan is data, read from the database only. Each step names its objects by id and
carries every decision act will take: which machine rows to make (and their index), which
card a machine's vGPUs go on and their names, which vGPUs and VMs a teardown or a cluster
deletion removes. Act carries out exactly that, checking only that the rows it touches are
as the plan saw them; a step that no longer applies is dropped and planned again. The dry
run (API, cluster page) shows exactly this, with the whitesky calls each step will make
(`calls()`), and the planning costs O(machines + cards): one card book per location.

A machine whose VM was made with another spec than its pool's (`Machine.spec`) is replaced
one at a time, as a Cluster API MachineDeployment rolls (max unavailable 1, max surge 0):
`rollout_step`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar, Literal, TypeVar, get_args

from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.utils import timezone

from capvco_web.integrations.whitesky import operations as ops
from capvco_web.plans import Call as Call  # kube_plan reads it here
from capvco_web.plans import PlanStep
from cloud.models import Location, VirtualMachine
from clusters.models import Cluster, ClusterSite, Machine, MachineDrain, MachinePool
from clusters.selectors import pools_by_cluster
from gpus import naming
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import CardPicker, GpuBusy, GpuUnavailable

Phase = Machine.Phase
RState = VgpuReservation.State
VM_GONE = frozenset({"DELETED", "DESTROYED"})
LIVE_RESERVATION = (RState.RESERVING, RState.RESERVED, RState.ATTACHED, RState.RELEASING)
HELD = "billed_reservations"  # a machine's vGPUs, when read with it (_machines)

Kind = Literal["create", "provision", "replace_vm", "replace", "teardown", "reclaim"]
KINDS: tuple[Kind, ...] = get_args(Kind)
BlockedBy = Literal["", "observation", "capacity", "conflict", "backoff", "machines"]


@dataclass(frozen=True)
class VgpuSlot:
    """A vGPU to reserve: its index on the machine and the name that records its owner."""

    index: int
    name: str


@dataclass(frozen=True)
class VgpuRelease:
    """A reservation to release (detach, permanently)."""

    reservation_id: int
    vgpu_id: str | None  # None: a reserve whose answer was lost, resolved by name first
    name: str

    def __str__(self) -> str:
        return f"{self.name} ({self.vgpu_id or 'id unknown'})"


@dataclass(frozen=True)
class VmRemoval:
    """A VM to stop (when it runs) and delete for good, as last seen."""

    vm_id: int
    cloudspace_id: str
    name: str
    status: str
    """As listed; "" when the last listing did not show it (gone, or in the recycle bin)."""

    def __str__(self) -> str:
        return f"{self.name} ({self.vm_id})"

    def calls(self) -> tuple[Call, ...]:
        vm = str(self.vm_id)
        if self.status == "DESTROYED":
            return ()
        if not self.status:
            return (Call(ops.DELETE_VM.operation_id, vm, maybe=True),)
        stop = (Call(ops.STOP_VM.operation_id, vm),) if self.status == "RUNNING" else ()
        return (*stop, Call(ops.DELETE_VM.operation_id, vm))


Spec = tuple[tuple[str, str | int], ...]
"""What a machine's VM is made with: its pool's SPEC_FIELDS, as planned."""


@dataclass(frozen=True, kw_only=True)
class _Step:
    """What every machine step names: its kind (the class's), what it is about and why, and,
    when act cannot do it yet, why not (act records that on the machine and calls nothing)."""

    kind: ClassVar[Kind]
    target: str
    reason: str
    cluster_id: int
    blocked: str = ""
    blocked_by: BlockedBy = ""

    def actions(self) -> list[str]:
        """What the step does, in words, one part per thing (the cluster page's rows)."""
        return []

    def calls(self) -> tuple[Call, ...]:
        return ()

    def describe(self) -> str:
        parts = [f"{self.kind} {self.target}: {self.reason}", *self.actions()]
        if self.blocked:
            parts.append(f"blocked: {self.blocked}")
        return "; ".join(parts)

    def shown(self) -> dict[str, Any]:
        """The step in the dry run's one shape for every kind (the API's plan schema): what
        this kind does not carry is shown empty."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        shown = {**SHOWN_EMPTY, **own, "kind": self.kind}
        shown["reserve_names"] = [slot.name for slot in shown["reserve"]]
        shown["release_shown"] = [str(r) for r in shown["release"]]
        shown["remove_vms_shown"] = [str(vm) for vm in shown["remove_vms"]]
        shown["calls"] = self.calls()
        shown["describe"] = self.describe()
        return shown

    def as_data(self) -> dict[str, Any]:
        """The step as JSON data, for the message that hands it to a worker
        (`step_from_data` reads it back)."""
        data = {"kind": self.kind, **dataclasses.asdict(self)}
        for name in ("seen", "next_try_at"):
            if data.get(name) is not None:
                data[name] = data[name].isoformat()
        return data


SHOWN_EMPTY: dict[str, Any] = {
    "pool_id": None, "machine_id": None, "index": None, "vm_id": None, "card_id": "",
    "reserve": (), "attach": (), "release": (), "remove_vms": (), "next_try_at": None,
}  # fmt: skip


def _vm_calls(remove_vms: tuple[VmRemoval, ...]) -> list[Call]:
    return [call for vm in remove_vms for call in vm.calls()]


def _releases(release: tuple[VgpuRelease, ...]) -> list[Call]:
    op = ops.RELEASE_VGPU.operation_id
    return [Call(op, r.vgpu_id) for r in release if r.vgpu_id]


@dataclass(frozen=True, kw_only=True)
class _VmStep(_Step):
    """A step that makes or starts a machine's VM with its vGPUs on one card."""

    pool_id: int
    vm_name: str
    spec: Spec
    """Act makes the VM with exactly this, and drops the step when the pool changed since."""
    create_vm: bool = False
    start_vm: bool = False
    card_id: str = ""
    """The card the machine's missing vGPUs are reserved on."""
    reserve: tuple[VgpuSlot, ...] = ()
    offered: str = ""
    """capacity: what the location offers of every type, told once a machine has waited
    MACHINE_CAPACITY_STUCK_SECONDS (`Machine.capacity_stuck_since`)."""

    def __post_init__(self) -> None:
        if not self.spec:  # act never chooses what a machine is made with
            raise ValueError(f"{self.kind} {self.target}: the plan names no spec")

    @property
    def attach(self) -> tuple[str, ...]:
        return ()

    @property
    def remove_vms(self) -> tuple[VmRemoval, ...]:
        return ()

    def _vm_ref(self) -> str:
        return self.vm_name

    def actions(self) -> list[str]:
        parts = []
        if self.remove_vms:
            parts.append(f"remove VM {', '.join(str(vm) for vm in self.remove_vms)}")
        if self.create_vm:
            parts.append(f"create VM {self.vm_name}")
        if self.attach:
            parts.append(f"attach {', '.join(self.attach)}")
        if self.reserve:
            card = f" on card {self.card_id}" if self.card_id else ""
            parts.append(f"reserve {', '.join(slot.name for slot in self.reserve)}{card}")
        if self.start_vm:
            parts.append("start its VM")
        return parts

    def calls(self) -> tuple[Call, ...]:
        if self.blocked:
            return ()
        calls = _vm_calls(self.remove_vms)
        vm_ref = self.vm_name if self.create_vm else self._vm_ref()
        if self.create_vm:
            calls.append(Call(ops.CREATE_VM.operation_id, self.vm_name))
        calls += [Call(ops.ATTACH_VGPU.operation_id, vgpu_id) for vgpu_id in self.attach]
        reserve = ops.RESERVE_AND_ATTACH_VGPU.operation_id
        calls += [Call(reserve, f"{vm_ref}/{self.card_id}") for _ in self.reserve]
        if self.start_vm:
            calls.append(Call(ops.START_VM.operation_id, vm_ref))
        return tuple(calls)


@dataclass(frozen=True, kw_only=True)
class MachineCreate(_VmStep):
    """A machine the pool lacks: act makes its row at `index`, then provisions it."""

    kind: ClassVar[Kind] = "create"
    index: int
    """The index (and so the name) of the machine act makes."""

    def made(self, machine_id: int, seen: datetime) -> MachineProvision:
        """The provisioning of the machine act made for this step, as planned."""
        mine = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del mine["index"]
        return MachineProvision(**mine, machine_id=machine_id, seen=seen)


@dataclass(frozen=True, kw_only=True)
class MachineProvision(_VmStep):
    """A machine not running yet (or failed, or waiting for capacity): its VM, vGPUs and
    start. `seen` is the machine row's `updated_at` as planned: act drops the step when the
    row changed since."""

    kind: ClassVar[Kind] = "provision"
    machine_id: int
    seen: datetime
    vm_id: int | None = None
    """The machine's VM as planned; None: none yet."""
    attach: tuple[str, ...] = ()
    """vGPU ids the machine holds that are to be attached to its (new) VM."""
    next_try_at: datetime | None = None
    """backoff: when the failed machine is tried again."""

    def _vm_ref(self) -> str:
        return str(self.vm_id)


@dataclass(frozen=True, kw_only=True)
class VmReplace(MachineProvision):
    """A running machine whose VM is gone from a complete listing: the VM's leftovers
    removed, a new VM made and provisioned for the same machine."""

    kind: ClassVar[Kind] = "replace_vm"
    remove_vms: tuple[VmRemoval, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MachineTeardown(_Step):
    """A machine to delete: its VM removed and every vGPU it holds released."""

    kind: ClassVar[Kind] = "teardown"
    pool_id: int
    machine_id: int
    seen: datetime
    vm_id: int | None
    vm_name: str
    location: str
    """The location whose vGPUs the step releases."""
    release: tuple[VgpuRelease, ...] = ()
    remove_vms: tuple[VmRemoval, ...] = ()
    next_try_at: datetime | None = None

    def actions(self) -> list[str]:
        return _removal_actions(self.remove_vms, self.release)

    def calls(self) -> tuple[Call, ...]:
        if self.blocked:
            return ()
        return (*_vm_calls(self.remove_vms), *_releases(self.release))

    def replacing(self) -> MachineReplace:
        """The same teardown, for a machine made with an older spec than its pool's."""
        mine = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return MachineReplace(**mine)


@dataclass(frozen=True, kw_only=True)
class MachineReplace(MachineTeardown):
    """A teardown of a machine made with an older spec: the pool then makes a new one."""

    kind: ClassVar[Kind] = "replace"


@dataclass(frozen=True, kw_only=True)
class ClusterReclaim(_Step):
    """A deleted cluster's leftovers once its machines are gone: every VM and vGPU named
    for it, as last observed."""

    kind: ClassVar[Kind] = "reclaim"
    release: tuple[VgpuRelease, ...] = ()
    release_locations: tuple[str, ...] = ()
    """The location of each release, in the order of `release`."""
    remove_vms: tuple[VmRemoval, ...] = ()

    def actions(self) -> list[str]:
        return _removal_actions(self.remove_vms, self.release)

    def calls(self) -> tuple[Call, ...]:
        if self.blocked:
            return ()
        return (*_vm_calls(self.remove_vms), *_releases(self.release))


def _removal_actions(
    remove_vms: tuple[VmRemoval, ...], release: tuple[VgpuRelease, ...]
) -> list[str]:
    parts = []
    if remove_vms:
        parts.append(f"remove VM {', '.join(str(vm) for vm in remove_vms)}")
    if release:
        parts.append(f"release {', '.join(str(r) for r in release)}")
    return parts


MachineStep = (
    MachineCreate | MachineProvision | VmReplace | MachineTeardown | MachineReplace | ClusterReclaim
)
"""One thing act will do to one machine (or, for a reclaim, to a deleted cluster's
leftovers), with every id it needs: one class per kind."""
STEP_CLASSES: dict[str, type[_Step]] = {
    cls.kind: cls
    for cls in (
        MachineCreate,
        MachineProvision,
        VmReplace,
        MachineTeardown,
        MachineReplace,
        ClusterReclaim,
    )
}


def step_from_data(data: dict[str, Any]) -> MachineStep:
    """A step from `as_data`, as the worker's task receives it."""
    fields = dict(data)
    cls = STEP_CLASSES[fields.pop("kind")]
    for name in ("seen", "next_try_at"):
        if fields.get(name) is not None:
            fields[name] = datetime.fromisoformat(fields[name])
    if "reserve" in fields:
        fields["reserve"] = tuple(VgpuSlot(**s) for s in fields["reserve"])
    if "release" in fields:
        fields["release"] = tuple(VgpuRelease(**r) for r in fields["release"])
    if "remove_vms" in fields:
        fields["remove_vms"] = tuple(VmRemoval(**vm) for vm in fields["remove_vms"])
    for name in ("attach", "release_locations"):
        if name in fields:
            fields[name] = tuple(fields[name])
    if "spec" in fields:
        fields["spec"] = tuple((name, value) for name, value in fields["spec"])
    return cls(**fields)  # type: ignore[return-value]


class CardBook:
    """The cards of a location with what is free on each: the last listing's count, less
    what we reserved (or asked for) since it began. Records come before calls, so a
    reserve in flight in another worker is already counted. A card whitesky refused for
    capacity since the listing began counts as full until a newer listing says more."""

    def __init__(self, location: Location, cards: list[GpuProfile]) -> None:
        self.location = location
        self.picker = CardPicker(cards, location=location.name)

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
            refused = set(
                Machine.objects.filter(
                    pool__site__location=location, gpu_card_refused_at__gt=since
                ).values_list("gpu_card_refused", flat=True)
            )
            for card in cards:
                free = card.available_instances - taken.get(card.profile_id, 0)
                card.available_instances = 0 if card.profile_id in refused else max(0, free)
        return cls(location, cards)

    def resolve(self, pool: MachinePool, count: int) -> str:
        """The card for `count` more vGPUs of the pool (GpuUnavailable when none fits)."""
        return self.picker.pick(count=count, gpu_type=pool.gpu_type, profile_id=pool.gpu_profile_id)

    def take(self, card_id: str, count: int) -> None:
        self.picker.take(card_id, count)


class CardBooks(dict[int, CardBook]):
    """One card book per location and plan, loaded when first needed."""

    def of(self, location: Location) -> CardBook:
        if location.pk not in self:
            self[location.pk] = CardBook.load(location)
        return self[location.pk]


Planner = Callable[[Cluster], Sequence[PlanStep]]
PLANNERS: list[tuple[Planner, tuple[str, ...]]] = []


def planner_register(planner: Planner, *, kinds: tuple[str, ...]) -> None:
    """Add a planner whose steps (of these kinds) every cluster plan lists after the
    machines' steps. Apps above `clusters` register theirs in `AppConfig.ready()`."""
    if all(known is not planner for known, _ in PLANNERS):
        PLANNERS.append((planner, kinds))


def planned_kinds(*given: str) -> tuple[str, ...]:
    """Every kind of step a plan may show: the machines' actions, then those of the
    planners a caller gives (`given`), then the registered planners'."""
    return KINDS + given + tuple(kind for _, kinds in PLANNERS for kind in kinds)


@dataclass
class ClusterPlan:
    cluster: Cluster
    steps: list[MachineStep] = field(default_factory=list)
    # Planners of apps above, given by the caller that shows the whole plan (kube's node
    # labels and add-on): listed before the registered ones.
    planners: tuple[Planner, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.steps)

    @cached_property
    def planned(self) -> list[PlanStep]:
        """The registered planners' steps, planned when asked for (the dry run): their own
        tasks act on them, not the machines' pass."""
        planners = [*self.planners, *(planner for planner, _ in PLANNERS)]
        return [step for planner in planners for step in planner(self.cluster)]

    @property
    def shown(self) -> list[PlanStep]:
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


def missing_gpus(machine: Machine) -> list[int]:
    held = {row.owner_index for row in gpus_held(machine)}
    return [n for n in range(machine.pool.gpu_count) if n not in held]


@dataclass(frozen=True)
class GpuDecision:
    card_id: str = ""
    reserve: tuple[VgpuSlot, ...] = ()
    blocked: str = ""
    blocked_by: BlockedBy = ""
    offered: str = ""


def machine_gpu_decision(machine: Machine, books: CardBooks) -> GpuDecision:
    """The card and names of the vGPUs the machine lacks, or why there is none."""
    pool = machine.pool
    if not pool.wants_gpus:
        return GpuDecision()
    location = pool.site.location
    missing = missing_gpus(machine)
    reserve = tuple(VgpuSlot(n, machine.vgpu_name(n)) for n in missing)
    if not location.observation_complete:
        why = (
            f"{location.name} is not completely observed yet; no vGPU is reserved "
            "until its listing is whole"
        )
        return GpuDecision(reserve=reserve, blocked=why, blocked_by="observation")
    if not missing:
        return GpuDecision()
    book = books.of(location)
    try:
        card_id = book.resolve(pool, len(missing))
    except GpuUnavailable as exc:
        offered = exc.offered if isinstance(exc, GpuBusy) else ""
        return GpuDecision(
            reserve=reserve, blocked=str(exc), blocked_by="capacity", offered=offered
        )
    book.take(card_id, len(missing))
    return GpuDecision(card_id=card_id, reserve=reserve)


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


VmIndex = dict[tuple[int, str], list[VirtualMachine]]
"""Listed VMs by (location, "#<VM id>") and by (location, name)."""


def _vm_status(machine: Machine, vms: VmIndex) -> str:
    """The machine's VM's status as listed; "" when a listing begun after the VM was made
    lacks it (gone, or in the recycle bin); else, made since, as its phase says."""
    location = machine.pool.site.location
    listed = vms.get((location.pk, f"#{machine.vm_id}"))
    if listed:
        return listed[0].status
    began = location.observation_started_at
    if machine.vm_created_at is not None and began is not None and began > machine.vm_created_at:
        return ""
    return "RUNNING" if machine.phase in (Phase.RUNNING, Phase.STARTING) else "HALTED"


def machine_teardown_step(
    machine: Machine, reason: str, vms: VmIndex, *, now: datetime | None = None
) -> MachineTeardown:
    """The machine's teardown; held back only after a try that failed (the machine is
    `deleting`), until its next try: a deletion just asked for is tried at once."""
    pool = machine.pool
    site = pool.site
    held = gpus_held(machine)
    removals: list[VmRemoval] = []
    if machine.vm_id is not None:
        removals.append(
            VmRemoval(machine.vm_id, site.cloudspace_id, machine.vm_name, _vm_status(machine, vms))
        )
    elif machine.vm_create_deadline is not None:
        # A create whose answer was lost: what the listing shows of it goes too.
        removals += [
            VmRemoval(vm.vm_id, vm.cloudspace_id, vm.name, vm.status)
            for vm in vms.get((site.location_id, machine.vm_name), [])
            if vm.status != "DESTROYED" and vm.cloudspace_id == site.cloudspace_id
        ]
    step = MachineTeardown(
        target=machine.name,
        reason=reason,
        cluster_id=pool.cluster_id,
        pool_id=pool.pk,
        machine_id=machine.pk,
        seen=machine.updated_at,
        vm_id=machine.vm_id,
        vm_name=machine.vm_name,
        location=site.location.name,
        release=tuple(VgpuRelease(row.pk, row.vgpu_id, row.name) for row in held),
        remove_vms=tuple(removals),
    )
    return _backoff_held(machine, step, now=now) if machine.phase == Phase.DELETING else step


Held = TypeVar("Held", MachineTeardown, MachineProvision)


def _backoff_held(machine: Machine, step: Held, *, now: datetime | None) -> Held:
    """The step, blocked until the machine's next try when that is still to come."""
    if machine.next_try_at is None or machine.next_try_at <= (now or timezone.now()):
        return step
    next_try = f"next try at {machine.next_try_at:%Y-%m-%d %H:%M:%S} UTC"
    if machine.waiting_for_capacity:
        why = f"{machine.failure_message} (looked {machine.failures} time(s)); {next_try}"
    else:
        why = f"failed {machine.failures} time(s) in a row; {next_try}"
    return dataclasses.replace(
        step, blocked=why, blocked_by="backoff", next_try_at=machine.next_try_at
    )


def machine_step(
    machine: Machine, books: CardBooks, vms: VmIndex, *, now: datetime | None = None
) -> MachineStep | None:
    """The step one existing machine needs, or None when it is as asked."""
    pool = machine.pool
    if machine.deletion_asked or machine.phase == Phase.DELETING:
        return machine_teardown_step(machine, "deletion requested", vms, now=now)
    site = pool.site
    vm_id = machine.vm_id
    listed = vms.get((site.location_id, f"#{vm_id}"), [None])[0] if vm_id is not None else None
    common: dict[str, Any] = {
        "target": machine.name,
        "cluster_id": pool.cluster_id,
        "pool_id": pool.pk,
        "machine_id": machine.pk,
        "seen": machine.updated_at,
        "vm_id": machine.vm_id,
        "vm_name": machine.vm_name,
        "spec": spec_planned(pool),
    }
    base: MachineProvision
    if machine.phase == Phase.RUNNING:
        if not vm_vanished(machine, site, listed):
            return None
        assert vm_id is not None
        status = listed.status if listed is not None else ""
        base = VmReplace(
            **common,
            reason=f"its VM {vm_id} is not in the listing of {site.cloudspace_id}",
            remove_vms=(VmRemoval(vm_id, site.cloudspace_id, machine.vm_name, status),),
        )
        vm_id = None
    else:
        base = MachineProvision(**common, reason=f"phase {machine.phase}")
    # A failed machine, or one waiting for capacity, is tried again after its backoff.
    if machine.phase == Phase.FAILED or machine.waiting_for_capacity:
        held_back = _backoff_held(machine, base, now=now)
        if held_back.blocked:
            return held_back
    held = gpus_held(machine)
    conflict = next(
        (
            row
            for row in held
            if row.vm_id is not None and row.vm_id != vm_id and not isinstance(base, VmReplace)
        ),
        None,
    )
    if conflict is not None:
        why = f"{conflict.name} is attached to VM {conflict.vm_id}, not to this machine's VM"
        return dataclasses.replace(base, blocked=why, blocked_by="conflict")
    gpus = machine_gpu_decision(machine, books)
    creating = vm_id is None
    running = listed is not None and listed.status == "RUNNING" and not creating
    attach = tuple(
        row.vgpu_id for row in held if row.vgpu_id is not None and (creating or row.vm_id is None)
    )
    return dataclasses.replace(
        base,
        create_vm=creating,
        start_vm=not running,
        card_id=gpus.card_id,
        reserve=gpus.reserve,
        attach=attach,
        blocked=gpus.blocked,
        blocked_by=gpus.blocked_by,
        offered=gpus.offered,
    )


def spec_planned(pool: MachinePool) -> tuple[tuple[str, str | int], ...]:
    return tuple(pool.machine_spec().items())


def rollout_step(
    pool: MachinePool, members: list[Machine], steps: dict[int, MachineStep | None], vms: VmIndex
) -> MachineReplace | None:
    """The replacement of one machine made with an older spec than its pool's (a rolling
    update with at most one machine unavailable and none made beyond the replicas): only
    while the pool has its replicas and every other machine runs with nothing to do.
    `steps` holds each member's step otherwise (None: none). The step tears the machine
    down; the pool then makes a new one with its spec, as for any missing replica."""
    live = [m for m in members if not (m.deletion_asked or m.phase == Phase.DELETING)]
    if len(live) != pool.effective_replicas or len(live) != len(members):
        return None  # a replica missing, or one going: the rollout waits for it
    outdated = [m for m in live if m.spec_changes()]
    if not outdated:
        return None
    # Those that are not running first (no loss of a working machine), then by index.
    machine = min(outdated, key=lambda m: (m.phase == Phase.RUNNING, m.index))
    others = [m for m in live if m.pk != machine.pk]
    if any(m.phase != Phase.RUNNING or steps.get(m.pk) is not None for m in others):
        return None
    reason = f"pool spec changed: {', '.join(machine.spec_changes())}"
    return machine_teardown_step(machine, reason, vms).replacing()


def _scale_down_order(machine: Machine) -> tuple[bool, bool, int]:
    # The machine the autoscaler drained first (it lowered the target for it), then
    # machines that are not running, then the newest.
    drained = (
        machine.drain_now is not None and machine.drain_now.phase == MachineDrain.Phase.DRAINED
    )
    return (not drained, machine.phase == Phase.RUNNING, -machine.index)


def cluster_plan(
    cluster: Cluster, *, now: datetime | None = None, planners: Sequence[Planner] = ()
) -> ClusterPlan:
    """Everything the next pass would do for the cluster, from the database only; with
    `planners`, their steps too (planned when asked for)."""
    plan = ClusterPlan(cluster, planners=tuple(planners))
    books = CardBooks()
    # Each pool once, with its site and location: the machines share these objects.
    pools = list(cluster.pools.select_related("site__location", "target").order_by("name"))
    for pool in pools:
        pool.cluster = cluster
    machines = _machines(Q(pool__cluster=cluster), pools)
    vms = _observed_vms(cluster)
    if cluster.state == Cluster.State.DELETING:
        for machine in machines:
            plan.steps.append(
                machine_teardown_step(machine, "cluster is being deleted", vms, now=now)
            )
        plan.steps.append(cluster_reclaim_step(cluster, machines_left=len(machines), vms=vms))
        return plan
    by_pool: dict[int, list[Machine]] = defaultdict(list)
    for machine in machines:
        by_pool[machine.pool_id].append(machine)
    leftovers: dict[int, int] | None = None
    for pool in pools:
        members = by_pool.get(pool.pk, [])
        live = [m for m in members if not (m.deletion_asked or m.phase == Phase.DELETING)]
        replicas = pool.effective_replicas
        surplus = {
            m.pk for m in sorted(live, key=_scale_down_order)[: max(0, len(live) - replicas)]
        }
        steps: dict[int, MachineStep | None] = {}
        for machine in members:
            if machine.pk in surplus:
                reason = f"pool {pool.name} scaled to {replicas}" + (
                    " by the autoscaler" if pool.autoscale_enabled else ""
                )
                steps[machine.pk] = machine_teardown_step(machine, reason, vms, now=now)
            else:
                steps[machine.pk] = machine_step(machine, books, vms, now=now)
        if (replacing := rollout_step(pool, members, steps, vms)) and replacing.machine_id:
            steps[replacing.machine_id] = replacing
        plan.steps += [step for step in steps.values() if step is not None]
        if replicas > len(live) and leftovers is None:
            leftovers = indexes_after_leftovers(cluster, pools)
        first = max(pool.next_index, (leftovers or {}).get(pool.pk, 0))
        # An imported pool whose GPUs can never fit gets no machine (its condition says why).
        missing = 0 if pool.gpu_fit_refusal else replicas - len(live)
        for offset in range(missing):
            index = first + offset
            name = f"{pool.name}-{index}"
            probe = Machine(pool=pool, name=name, index=index)
            gpus = machine_gpu_decision(probe, books)
            plan.steps.append(
                MachineCreate(
                    target=name,
                    reason=f"pool {pool.name} has {len(live)} of {replicas} machines",
                    cluster_id=cluster.pk,
                    pool_id=pool.pk,
                    index=index,
                    vm_name=probe.vm_name,
                    create_vm=not gpus.blocked,
                    start_vm=not gpus.blocked,
                    spec=spec_planned(pool),
                    card_id=gpus.card_id,
                    reserve=gpus.reserve,
                    blocked=gpus.blocked,
                    blocked_by=gpus.blocked_by,
                    offered=gpus.offered,
                )
            )
    return plan


def indexes_after_leftovers(cluster: Cluster, pools: list[MachinePool]) -> dict[int, int]:
    """Per pool, the first index no listed VM or vGPU name carries (a pool deleted and made
    again): a new machine never adopts what an earlier one left. Two queries per cluster."""
    prefix = f"{naming.PREFIX}{cluster.name}-"
    names = list(
        VirtualMachine.objects.filter(name__startswith=prefix).values_list("name", flat=True)
    ) + list(
        VgpuReservation.objects.filter(name__startswith=prefix)
        .exclude(state=RState.RELEASED)
        .values_list("name", flat=True)
    )
    after: dict[int, int] = {}
    for pool in pools:
        head = f"{prefix}{pool.name}-"
        indexes = [
            int(rest.split("-", 1)[0])
            for rest in (n.removeprefix(head) for n in names if n.startswith(head))
            if rest.split("-", 1)[0].isdigit()
        ]
        after[pool.pk] = max(indexes, default=-1) + 1
    return after


def cluster_reclaim_step(cluster: Cluster, *, machines_left: int, vms: VmIndex) -> ClusterReclaim:
    """What a cluster deletion removes once its machines are gone: every VM and vGPU that
    carries its name, as last observed. Act removes exactly these, then lists again: what
    the new listing still shows keeps the deletion open for the next pass to plan."""
    reason = "VMs and vGPUs named for the cluster, in every location of its account"
    if machines_left:
        why = f"waits for the teardown of its {machines_left} machine(s)"
        return ClusterReclaim(
            target=cluster.name, reason=reason, cluster_id=cluster.pk, blocked=why,
            blocked_by="machines",
        )  # fmt: skip
    is_ours = owned_by(cluster)
    sites = list(ClusterSite.objects.filter(cluster=cluster))
    spaces = {(site.location_id, site.cloudspace_id) for site in sites}
    removals = sorted(
        {
            vm.vm_id: VmRemoval(vm.vm_id, vm.cloudspace_id, vm.name, vm.status)
            for listed in vms.values()
            for vm in listed
            if (vm.location_id, vm.cloudspace_id) in spaces
            and vm.status != "DESTROYED"
            and is_ours(vm.name)
        }.values(),
        key=lambda vm: (vm.name, vm.vm_id),
    )
    rows = (
        VgpuReservation.objects.filter(
            location__account=cluster.account_id,
            name__startswith=naming.PREFIX,
            state__in=[RState.RESERVED, RState.ATTACHED, RState.RELEASING],
            vgpu_id__isnull=False,
        )
        .select_related("location")
        .order_by("location__name", "name")
    )
    ours = [row for row in rows if is_ours(row.name)]
    return ClusterReclaim(
        target=cluster.name,
        reason=reason,
        cluster_id=cluster.pk,
        release=tuple(VgpuRelease(row.pk, row.vgpu_id, row.name) for row in ours),
        release_locations=tuple(row.location.name for row in ours),
        remove_vms=tuple(removals),
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


def _machines(where: Q, pools: list[MachinePool]) -> list[Machine]:
    """The machines (of these pools), each with the vGPUs it holds: one query for them
    all, not one per machine (the dashboard shows the plan of a cluster of hundreds). One
    pool object per pool, shared by its machines, not one copy per machine."""
    held = VgpuReservation.objects.filter(state__in=LIVE_RESERVATION).order_by("owner_index", "pk")
    machines = list(
        Machine.objects.filter(where)
        .select_related("deletion", "drain")
        .prefetch_related(Prefetch("reservations", queryset=held, to_attr=HELD))
        .order_by("pool__name", "index")
    )
    by_id = {pool.pk: pool for pool in pools}
    for machine in machines:
        machine.pool = by_id[machine.pool_id]
    return machines


def _cluster_vms(cluster: Cluster) -> QuerySet[VirtualMachine]:
    site = ClusterSite.objects.filter(
        cluster=cluster, location=OuterRef("location"), cloudspace_id=OuterRef("cloudspace_id")
    )
    return VirtualMachine.objects.filter(Exists(site))


def _observed_vms(cluster: Cluster) -> VmIndex:
    """The listed VMs of the cluster's cloudspaces, by id and by name, in one query."""
    found: VmIndex = defaultdict(list)
    for vm in _cluster_vms(cluster).order_by("vm_id"):
        found[(vm.location_id, f"#{vm.vm_id}")].append(vm)
        found[(vm.location_id, vm.name)].append(vm)
    return found


@dataclass(frozen=True)
class PlanInputs:
    """What a cluster's plan reads, summed up in a few queries of tuples (no model is
    loaded): the cluster, its pools and their autoscale targets, its sites, its machines'
    rows (with their deletion requests and drains), the vGPUs they hold and the VMs listed
    in its cloudspaces. Two equal fingerprints mean the same plan, until `deadline`: the
    earliest time the plan compares with the clock (a machine's next try).

    A new listing counts by what it changed in those rows; its location's stamp counts
    only where a machine's VM is not listed (or listed gone), where the plan judges from
    the stamp whether the listing began after the VM was made (`vm_vanished`)."""

    fingerprint: str
    deadline: datetime | None


def plan_inputs(cluster: Cluster, *, now: datetime) -> PlanInputs:
    pool_fields = [f.attname for f in MachinePool._meta.concrete_fields]
    site_fields = [f.attname for f in ClusterSite._meta.concrete_fields]
    pools = MachinePool.objects.filter(cluster=cluster).order_by("pk")
    sites = ClusterSite.objects.filter(cluster=cluster).order_by("pk")
    machines = Machine.objects.filter(pool__cluster=cluster).order_by("pk")
    held = VgpuReservation.objects.filter(
        machine__pool__cluster=cluster, state__in=LIVE_RESERVATION
    ).order_by("pk")
    machine_rows = list(
        machines.values_list(
            "pk", "pool_id", "updated_at", "phase", "vm_id", "vm_created_at",
            "delete_requested", "next_try_at", "deletion__pk", "drain__pk", "drain__phase",
            "pool__site__location_id",
        )
    )  # fmt: skip
    vm_rows = list(
        _cluster_vms(cluster)
        .order_by("location_id", "vm_id", "pk")
        .values_list("location_id", "cloudspace_id", "vm_id", "name", "status")
    )
    listed = {
        (location, vm_id) for location, _, vm_id, _, status in vm_rows if status not in VM_GONE
    }
    unlisted = {row[-1] for row in machine_rows if row[4] and (row[-1], row[4]) not in listed}
    at = site_fields.index("location_id")
    site_rows = [
        (*site, complete, began if site[at] in unlisted else None)
        for *site, complete, began in sites.values_list(
            *site_fields, "location__observation_complete", "location__observation_started_at"
        )
    ]
    rows = (
        (cluster.pk, cluster.name, cluster.state, cluster.account_id),
        list(pools.values_list(*pool_fields, "target__pk", "target__replicas")),
        site_rows,
        machine_rows,
        list(
            held.values_list("pk", "machine_id", "state", "vm_id", "vgpu_id", "owner_index", "name")
        ),
        vm_rows,
    )
    tries = [row[7] for row in machine_rows if row[7] is not None and row[7] > now]
    return PlanInputs(hashlib.sha256(repr(rows).encode()).hexdigest(), min(tries, default=None))
