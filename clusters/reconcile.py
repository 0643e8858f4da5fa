"""Act on a cluster's plan: make machine rows, provision, replace, tear down, reclaim.

`cluster_reconcile` plans under the cluster's lock and does there only what is the
cluster's own: new machine rows (the index the plan chose), marking the surplus of a
scaled-down pool, and reclaiming a deleted cluster's leftovers. Each machine's step is
`machine_reconcile`, under that machine's own lock: the beat task hands the step itself to
the worker pool, the in-process path runs the steps one after another. There is never more
than one mutation in flight per VM.

Act never chooses: it carries out the step as planned (the card, the vGPU names, the VMs
and vGPUs to remove). It checks only that the rows it touches are as the plan saw them
(the machine's `updated_at`, the vGPUs it holds); a step whose preconditions no longer
hold is dropped (counted `dropped`) and the next pass plans again. Listings are read only
to resolve a write whose answer was lost, by its name, from a listing begun after the
call could no longer land.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar, assert_never

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.backoff import backoff_seconds
from capvco_web.counters import reconcile_step_count
from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from capvco_web.models import AuditEvent
from capvco_web.plans import (
    Outcome,
    PassRecord,
    PlanStep,
    StepDropped,
    StepFailed,
    StepWaiting,
    Stopwatch,
    plan_apply,
)
from capvco_web.rows import model_update
from capvco_web.worker_slots import account_calls_slot
from cloud.models import Location
from cloud.services import InUse
from clusters.cloud_init import machine_user_data
from clusters.models import (
    GPU_SPEC_FIELDS,
    Cluster,
    ClusterSite,
    ClusterStatus,
    Machine,
    MachinePool,
    VmRemovalRequest,
)
from clusters.plan import (
    VM_GONE,
    ClusterReclaim,
    MachineCreate,
    MachineProvision,
    MachineReplace,
    MachineStep,
    MachineTeardown,
    PlanInputs,
    Planner,
    VmReplace,
    cluster_plan,
    gpus_held,
    missing_gpus,
    owned_by,
    plan_inputs,
)
from clusters.services import cluster_rows_delete
from gpus.models import VgpuReservation
from gpus.resolve import CAPACITY_WAIT
from gpus.services import (
    OutcomePending,
    VgpuOwner,
    reservation_attach,
    reservation_pending_resolve,
    reservation_release,
    reservation_reserve_and_attach,
)

logger = logging.getLogger(__name__)
K = TypeVar("K")
L = TypeVar("L")
Phase = Machine.Phase
RState = VgpuReservation.State
ACTOR = SystemActor.RECONCILER


@dataclass
class ReconcileResult:
    cluster: str
    plan: list[MachineStep]
    applied: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str = ""
    unchanged_since: datetime | None = None
    """Not planned: its inputs are as when its plan was last computed in full (then) and
    found nothing to do."""
    cluster_deleted: bool = False
    record: PassRecord | None = field(default=None, compare=False, repr=False)
    """The pass as `plan_apply` recorded it (None: skipped)."""


class PassContext:
    """Listings fetched while acting, to resolve lost answers, each with the moment it
    began; one per object and pass unless a later one is needed."""

    def __init__(self, client: ws.WhiteskyClient) -> None:
        self.client = client
        self._vgpus: dict[int, tuple[datetime, ws.Listing[ws.Vgpu]]] = {}
        self._vms: dict[str, tuple[datetime, list[ws.Vm]]] = {}

    def vgpus(
        self, location: Location, *, begun_after: datetime | None = None
    ) -> tuple[datetime, ws.Listing[ws.Vgpu]]:
        return _listing(
            self._vgpus,
            location.pk,
            begun_after,
            lambda: self.client.list_vgpus(location=location.name),
        )

    def vms(
        self, site: ClusterSite, *, begun_after: datetime | None = None
    ) -> tuple[datetime, list[ws.Vm]]:
        return _listing(
            self._vms,
            site.cloudspace_id,
            begun_after,
            lambda: self.client.list_vms(cloudspace_id=site.cloudspace_id),
        )


def _listing(
    cache: dict[K, tuple[datetime, L]], key: K, begun_after: datetime | None, fetch: Callable[[], L]
) -> tuple[datetime, L]:
    """The cached listing, or a new one when none is cached or the cached one began too
    early to tell about what happened after `begun_after`."""
    cached = cache.get(key)
    if cached is None or (begun_after is not None and cached[0] <= begun_after):
        began = timezone.now()
        cached = cache[key] = (began, fetch())
    return cached


# --- the cluster -----------------------------------------------------------------------


def cluster_reconcile(
    *,
    client: ws.WhiteskyClient,
    cluster: Cluster,
    dry_run: bool = False,
    fan_out: Callable[[MachineWork], None] | None = None,
    planners: Sequence[Planner] = (),
) -> ReconcileResult:
    """Plan the cluster and apply the plan through the one dispatcher, recording the pass.
    With `fan_out`, each machine's step is handed to it (the worker pool) once its row is
    made or marked here; without, it runs here. A dry run calls nothing; it lists the
    steps of `planners` too (apps above give theirs: kube's node labels and add-on).

    A cluster whose plan's inputs (`plan_inputs`) are as when its last plan, computed in
    full, had nothing to do is not planned again: a few queries, no model loaded. It is
    planned in full once one of them changes, a deadline that plan compared with the clock
    comes, or RECONCILE_RESYNC passed since."""
    started, watch = timezone.now(), Stopwatch()
    if dry_run:
        # Every plan of the cluster: its machines', the given and the registered planners'
        # (its Kubernetes objects, its NICs), each step's calls listed and none made.
        plan = cluster_plan(cluster, planners=planners)
        record = plan_apply(
            plan.shown, _nothing, scope="cluster", scope_id=cluster.pk, dry_run=True,
            started_at=started, plan_ms=watch.lap(),
        )  # fmt: skip
        return ReconcileResult(cluster=cluster.name, plan=plan.steps, record=record)
    # The lock before the plan: two passes that both planned would waste one plan.
    with object_lock(f"cluster:{cluster.pk}") as taken:
        if not taken:
            return ReconcileResult(
                cluster=cluster.name, plan=[], skipped="another pass holds the cluster's lock"
            )
        now = timezone.now()
        idle = (
            ClusterStatus.objects.filter(cluster=cluster)
            .values_list("idle_inputs", "idle_until", "idle_planned_at")
            .first()
        )
        # Read before the plan: a change between the two shows as a change next pass.
        inputs = plan_inputs(cluster, now=now)
        if idle is not None and _idle_still(*idle, inputs=inputs, now=now):
            return ReconcileResult(cluster=cluster.name, plan=[], unchanged_since=idle[2])
        plan = cluster_plan(cluster, now=now)
        result = ReconcileResult(cluster=cluster.name, plan=plan.steps)
        if not plan:
            _idle_record(cluster, inputs, now)
            return result
        if idle is not None and idle[0]:
            _idle_forget(cluster, now)
        plan_ms = watch.lap()
        ctx = PassContext(client)

        def act(planned: PlanStep) -> Outcome | None:
            assert isinstance(planned, MACHINE_STEPS)
            if isinstance(planned, ClusterReclaim):
                deleted = cluster_leftovers_reclaim(PassContext(client), cluster, planned)
                result.cluster_deleted = deleted
                return None
            if planned.blocked_by == "backoff":
                return None  # a machine waiting for its next try has nothing to do yet
            step = _machine_row_apply(planned)
            if fan_out is None:
                machine_reconcile(ctx, step)
                return None
            fan_out(step)
            return "sent"

        result.record = record = plan_apply(
            plan.steps, act, scope="cluster", scope_id=cluster.pk, started_at=started,
            plan_ms=plan_ms, on_blocked=act, failures=(ws.WhiteskyError,),
        )  # fmt: skip
        record.save()
    result.applied = [
        str(o) if o.outcome == "ran" else f"sent {o.target}" for o in record.of("ran", "sent")
    ]
    result.errors = [str(o) for o in record.of("blocked", "dropped", "waiting", "failed")]
    for error in result.errors:
        logger.warning("cluster %s: %s", cluster.name, error)
    return result


def _idle_still(
    fingerprint: str,
    until: datetime | None,
    planned_at: datetime | None,
    *,
    inputs: PlanInputs,
    now: datetime,
) -> bool:
    """Whether the last empty plan holds still: its inputs unchanged, none of its deadlines
    come, and planned in full within the resync."""
    return (
        fingerprint == inputs.fingerprint
        and (until is None or now < until)
        and planned_at is not None
        and now < planned_at + settings.RECONCILE_RESYNC
    )


def _idle_record(cluster: Cluster, inputs: PlanInputs, now: datetime) -> None:
    """The plan computed in full had nothing to do: its inputs, so that the next passes
    skip planning while they stay the same, until its first deadline or the resync."""
    idle = {
        "idle_inputs": inputs.fingerprint, "idle_planned_at": now, "idle_until": inputs.deadline,
    }  # fmt: skip
    if not ClusterStatus.objects.filter(cluster=cluster).update(**idle, updated_at=now):
        ClusterStatus.objects.get_or_create(cluster=cluster, defaults=idle)


def _idle_forget(cluster: Cluster, now: datetime) -> None:
    ClusterStatus.objects.filter(cluster=cluster).update(
        idle_inputs="", idle_until=None, updated_at=now
    )


def _nothing(step: PlanStep) -> None:
    raise AssertionError("a dry run acts on nothing")


MachineWork = MachineProvision | MachineTeardown
"""A machine's step once the cluster's part of it is done (`_machine_row_apply`): what the
machine's own pass (here, or a worker's task) carries out under the machine's lock."""
MACHINE_STEPS = (
    MachineCreate, MachineProvision, VmReplace, MachineTeardown, MachineReplace, ClusterReclaim,
)  # fmt: skip


def _machine_row_apply(step: MachineCreate | MachineProvision | MachineTeardown) -> MachineWork:
    """The cluster's own part of a machine's step, under the cluster's lock: a new
    machine's row (at the planned index), a teardown's mark on its row; the machine's
    step as its row now is."""
    match step:
        case MachineCreate():
            machine = machine_create(pool_id=step.pool_id, index=step.index, name=step.target)
            if machine is None:
                reconcile_step_count(step.kind, "dropped")
                raise StepDropped("index taken meanwhile; planned again")
            # The machine's own step provisions the machine made here, as planned.
            return step.made(machine.pk, machine.updated_at)
        case MachineTeardown():  # a replacement too
            now = timezone.now()
            marked = Machine.objects.filter(
                pk=step.machine_id, delete_requested=False, updated_at=step.seen
            ).update(delete_requested=True, updated_at=now)
            if marked:
                step = replace(step, seen=now)
                if isinstance(step, MachineReplace):
                    _replacement_audit(step)
            return step
        case MachineProvision():  # a VM's replacement too
            return step
        case _:
            assert_never(step)


def _replacement_audit(step: MachineReplace) -> None:
    """A machine made with an older spec than its pool's is to be torn down: recorded with
    what changed and why the pool was edited (its last edit's reason)."""
    machine = Machine.objects.select_related("pool__cluster").get(pk=step.machine_id)
    edit = (
        AuditEvent.objects.filter(
            object_type=MachinePool._meta.label,
            object_id=str(machine.pool_id),
            action="pool.update",
        )
        .order_by("-created_at", "-pk")
        .first()
    )
    reason = f"{step.reason} (pool edited: {edit.reason})" if edit and edit.reason else step.reason
    audit_record(
        actor=ACTOR,
        action="machine.delete_requested",
        obj=machine,
        reason=reason,
        before={"delete_requested": False, "phase": machine.phase, "spec": machine.spec},
        after={"delete_requested": True, "spec": machine.pool.machine_spec()},
    )


def machine_create(*, pool_id: int, index: int, name: str) -> Machine | None:
    """A new machine at `index`, named `name` (the plan's choices), or None when that index
    is taken meanwhile. Indexes are never reused, so a new machine never adopts what an
    earlier one left (the plan starts after the leftovers' names: `indexes_after_leftovers`)."""
    with transaction.atomic():
        # One conditional update claims the index: a second claim of it waits on the row
        # and then finds next_index past it.
        pools = MachinePool.objects.filter(pk=pool_id, next_index__lte=index)
        if not pools.update(next_index=index + 1):
            return None
        return Machine.objects.create(pool_id=pool_id, index=index, name=name)


# --- one machine -----------------------------------------------------------------------


def machine_reconcile(ctx: PassContext, step: MachineWork) -> None:
    """Carry out one machine's planned step, under the machine's lock, if the machine is
    still as the plan saw it; a blocked step records why on the machine. Raises the
    dispatcher's outcomes (`StepDropped`, `StepWaiting`, `StepFailed`)."""
    what = f"{step.kind} {step.target}"
    with object_lock(f"machine:{step.machine_id}") as taken:
        if not taken:
            raise StepWaiting("another worker holds the machine")
        machine = (
            Machine.objects.select_related(
                "pool__site__location__account", "pool__cluster", "deletion"
            )
            .filter(pk=step.machine_id)
            .first()
        )
        if machine is None:
            raise StepDropped("the machine is gone")
        # Act's own row as the plan saw it, and no deletion asked since (a person's request
        # is a row of its own, which no write to the machine's row can hide).
        if machine.updated_at != step.seen or (
            not isinstance(step, MachineTeardown) and machine.deletion_asked
        ):
            reconcile_step_count(step.kind, "dropped")
            logger.info("%s dropped: the machine changed since the plan", what)
            raise StepDropped("the machine changed since the plan; dropped")
        if step.blocked:
            _blocked_record(machine, step)
            reconcile_step_count(step.kind, "blocked")
            return
        with account_calls_slot(machine.pool.cluster.account_id) as slot:
            if not slot:
                reconcile_step_count(step.kind, "busy")
                raise StepWaiting("account busy")
            try:
                machine_step_act(ctx, machine, step)
            except StepDropped as exc:
                reconcile_step_count(step.kind, "dropped")
                logger.info("%s dropped: %s", what, exc)
                raise
            except (StepWaiting, OutcomePending) as exc:
                reconcile_step_count(step.kind, "waiting")
                raise StepWaiting(str(exc)) from exc
            except (StepFailed, Machine.DoesNotExist, ws.WhiteskyError) as exc:
                reconcile_step_count(step.kind, "error")
                raise StepFailed(str(exc)) from exc
    reconcile_step_count(step.kind, "applied")


def _blocked_record(machine: Machine, step: MachineWork) -> None:
    """What stands before a step, on the machine: cards of its type that have no room now
    make it wait for capacity; no card of its type, or a vGPU on another VM, fails it
    (either is tried again after its backoff); a location not wholly observed only says so."""
    if step.blocked_by == "capacity" and step.blocked.startswith(CAPACITY_WAIT):
        offered = step.offered if isinstance(step, MachineProvision) else ""
        _waiting_set(machine, step.blocked, offered=offered)
    elif step.blocked_by in ("capacity", "conflict"):
        _failed_set(machine, step.blocked)
    elif step.blocked_by == "observation":
        # Not knowing neither ends a wait for capacity nor adds to it.
        _machine_update(machine, {"failure_message": step.blocked})


def machine_step_act(ctx: PassContext, machine: Machine, step: MachineWork) -> None:
    """What a machine's step does, by its class (the machine locked and as planned)."""
    match step:
        case MachineTeardown():  # a replacement too
            machine_teardown(ctx, machine, step)
        case MachineProvision():
            if dict(step.spec) != machine.pool.machine_spec():
                raise StepDropped("its pool's GPUs or size changed since the plan")
            if isinstance(step, VmReplace):
                machine_vm_replace(ctx, machine, step)
            machine_provision(ctx, machine, step)
        case _:
            assert_never(step)


# --- provisioning ----------------------------------------------------------------------


def _machine_update(machine: Machine, data: Mapping[str, Any]) -> None:
    """Write the machine's row; a change of phase goes into its history (the audit log,
    `machine.phase`, with the message it changed with) in the same transaction. A row
    deleted meanwhile (a force delete) ends the step: what it made so far carries the
    machine's name, and the orphan sweep reclaims it."""
    before = {"phase": machine.phase, "failure_message": machine.failure_message}
    if data.get("phase", machine.phase) == machine.phase:
        written = model_update(machine, data)
    else:
        # One with the step's transaction where it runs in one: no savepoint of its own.
        with transaction.atomic(savepoint=False):
            if written := model_update(machine, data):
                after = {"phase": machine.phase, "failure_message": machine.failure_message}
                audit_record(
                    actor=ACTOR, action="machine.phase", obj=machine, before=before, after=after
                )
    if not written and not Machine.objects.filter(pk=machine.pk).exists():
        raise Machine.DoesNotExist(
            f"machine {machine} was deleted meanwhile: what it made is left to the orphan sweep"
        )


# Anything that becomes of a machine but a wait for capacity ends that wait, and its flag.
WAIT_ENDED = {"capacity_wait_since": None, "capacity_stuck_since": None}


def _phase_set(machine: Machine, phase: str, message: str = "") -> None:
    _machine_update(machine, {"phase": phase, "failure_message": message, **WAIT_ENDED})


def retry_delay(failures: int) -> timedelta:
    """How long a machine that failed `failures` times in a row waits before its next try:
    the base, doubled per failure, up to the cap."""
    return timedelta(
        seconds=backoff_seconds(
            failures - 1,
            base=settings.MACHINE_RETRY_BASE_SECONDS,
            cap=settings.MACHINE_RETRY_MAX_SECONDS,
        )
    )


def _failed_set(machine: Machine, message: str) -> None:
    failures = machine.failures + 1
    data = {
        "phase": Phase.FAILED,
        "failure_message": message,
        "failures": failures,
        "next_try_at": timezone.now() + retry_delay(failures),
        **WAIT_ENDED,
    }
    _machine_update(machine, data)


def _waiting_set(machine: Machine, message: str, *, offered: str) -> None:
    """Waiting for capacity: not failed (pending, or attaching once it has its VM), with
    what is free in the message; looked at again after the same backoff as a failure.

    A look that finds it still waiting MACHINE_CAPACITY_STUCK_SECONDS after its wait began
    flags it stuck (the alert, the notice, the metric), its message then naming what the
    location offers of every type: the pool may ask for a type or count the location will
    not have soon. It keeps waiting, and is made once room returns."""
    now = timezone.now()
    failures = machine.failures + 1
    phase = machine.phase
    if phase == Phase.FAILED:
        phase = Phase.PENDING if machine.vm_id is None else Phase.ATTACHING
    since = machine.capacity_wait_since or now
    stuck = machine.capacity_stuck_since
    if stuck is None and now - since >= timedelta(seconds=settings.MACHINE_CAPACITY_STUCK_SECONDS):
        stuck = now
    if stuck is not None:
        message = (
            f"{message}. Stuck: waiting since {since:%Y-%m-%d %H:%M} UTC; "
            f"{machine.pool.site.location.name} offers: {offered or '(not known to this step)'}"
        )
    data = {
        "phase": phase,
        "failure_message": message,
        "failures": failures,
        "next_try_at": now + retry_delay(failures),
        "capacity_wait_since": since,
        "capacity_stuck_since": stuck,
    }
    _machine_update(machine, data)


def machine_provision(ctx: PassContext, machine: Machine, step: MachineProvision) -> None:
    """Create the VM halted, reserve and attach its vGPUs on the planned card, then start
    it, as the step says."""
    try:
        _pending_resolve(ctx, machine)
        if missing_gpus(machine) != [slot.index for slot in step.reserve]:
            raise StepDropped("its vGPUs changed since the plan (a lost reserve was settled)")
        if step.create_vm:
            _vm_ensure(ctx, machine, step)
        _gpus_ensure(ctx, machine, step)
        _vm_start(ctx, machine, step)
    except StepFailed as exc:
        _failed_set(machine, str(exc))
        raise
    except (StepWaiting, OutcomePending) as exc:
        _phase_set(machine, machine.phase, str(exc))
        raise
    except ws.WhiteskyError as exc:
        # An unknown outcome keeps the phase: the next pass resolves it by name.
        if exc.outcome_unknown:
            _phase_set(machine, machine.phase, str(exc))
        else:
            _failed_set(machine, str(exc))
        raise


def _pending_resolve(ctx: PassContext, machine: Machine) -> None:
    """Reserves of this machine whose answers were lost: adopted, forgotten, or waited for."""
    pending = [row for row in gpus_held(machine) if row.vgpu_id is None]
    location = machine.pool.site.location
    for row in pending:
        after = row.reserve_deadline
        began, listing = ctx.vgpus(location, begun_after=after)
        reservation_pending_resolve(row=row, listing=listing, listed_at=began)


def _vm_ensure(ctx: PassContext, machine: Machine, step: MachineProvision) -> None:
    if machine.vm_id is not None:
        return
    pool = machine.pool
    site = pool.site
    if machine.vm_create_deadline is not None:
        # A create was sent and its answer not recorded: find it by name first.
        began, vms = ctx.vms(site, begun_after=machine.vm_create_deadline - _window(ctx))
        found = sorted(
            (vm for vm in vms if vm.name == machine.vm_name and vm.status not in VM_GONE),
            key=lambda vm: vm.vm_id,
        )
        if found:
            _machine_update(
                machine,
                {
                    "vm_id": found[0].vm_id,
                    "vm_created_at": timezone.now(),
                    "vm_create_deadline": None,
                },
            )
            return
        if began <= machine.vm_create_deadline:
            raise StepWaiting(
                f"a create of {machine.vm_name} sent earlier may still land until "
                f"{machine.vm_create_deadline:%H:%M:%S} UTC; no second one before"
            )
    spec = dict(step.spec)  # the plan's: act never chooses
    if machine.spec and gpus_held(machine):
        # vGPUs kept from its earlier VM (it vanished) go onto this one: as they were made.
        spec |= {name: machine.spec[name] for name in GPU_SPEC_FIELDS if name in machine.spec}
    _machine_update(
        machine,
        {
            "phase": Phase.CREATING,
            "vm_create_deadline": timezone.now() + _window(ctx),
            "gpu_driver_version": pool.gpu_driver_version if pool.wants_gpus else "",
            # What the create sends, recorded before it: a VM of a lost answer has it too.
            "spec": spec,
        },
    )
    try:
        vm_id = ctx.client.create_vm(
            cloudspace_id=site.cloudspace_id,
            name=machine.vm_name,
            description=f"capvco-web machine {machine} (pool {pool.name})",
            vcpus=pool.vcpus,
            memory_mib=pool.memory_mib,
            image_id=site.image_id,
            disk_size_gib=pool.disk_gib,
            start=False,
            user_data=machine_user_data(pool),
        )
    except ws.WhiteskyError as exc:
        if not exc.outcome_unknown:
            _machine_update(machine, {"vm_create_deadline": None})  # refused: nothing made
        raise
    _machine_update(
        machine, {"vm_id": vm_id, "vm_created_at": timezone.now(), "vm_create_deadline": None}
    )


def _window(ctx: PassContext) -> timedelta:
    return timedelta(seconds=ctx.client.outcome_window)


def _gpus_ensure(ctx: PassContext, machine: Machine, step: MachineProvision) -> None:
    """Attach the vGPUs it holds, then reserve the planned ones on the planned card. A
    card that has no room (taken since the listing, outside our records) ends the step:
    the refusal is recorded on the machine, where the next plan's card book sees it."""
    for row in gpus_held(machine):
        _attached_ensure(ctx, machine, row, step)
    if not step.reserve:
        return
    _phase_set(machine, Phase.ATTACHING)
    for slot in step.reserve:
        try:
            _reserve_and_attach(ctx, machine, slot.index, step.card_id)
        except ws.CapacityExhausted as exc:
            refused = {"gpu_card_refused": step.card_id, "gpu_card_refused_at": timezone.now()}
            _machine_update(machine, refused)
            raise StepWaiting(
                f"card {step.card_id} had no room for {slot.name} ({exc}); the next plan "
                "takes another card"
            ) from exc


def _reserve_and_attach(ctx: PassContext, machine: Machine, n: int, card_id: str) -> None:
    assert machine.vm_id is not None, "a reserve needs the machine's VM"
    site = machine.pool.site
    owner = VgpuOwner(
        machine_id=machine.pk,
        cluster=machine.pool.cluster.name,
        machine=machine.name,
        location_id=site.location_id,
        cloudspace_id=site.cloudspace_id,
        vm_id=machine.vm_id,
    )
    try:
        reservation_reserve_and_attach(client=ctx.client, owner=owner, n=n, gpu_id=card_id)
    except IntegrityError:
        if Machine.objects.filter(pk=machine.pk).exists():
            raise
        # Deleted meanwhile (a force delete): nothing is reserved for it.
        raise Machine.DoesNotExist(f"machine {machine} was deleted meanwhile") from None


def _attached_ensure(
    ctx: PassContext, machine: Machine, row: VgpuReservation, step: MachineProvision
) -> None:
    if row.vm_id == machine.vm_id:
        return
    if row.vm_id is not None:
        raise StepFailed(f"{row.name} is attached to VM {row.vm_id}, not to this machine's VM")
    assert machine.vm_id is not None and row.vgpu_id is not None
    if row.vgpu_id not in step.attach:
        raise StepDropped(f"{row.name} ({row.vgpu_id}) was not held when the step was planned")
    _phase_set(machine, Phase.ATTACHING)
    reservation_attach(
        client=ctx.client,
        row=row,
        cloudspace_id=machine.pool.site.cloudspace_id,
        vm_id=machine.vm_id,
    )


def _vm_start(ctx: PassContext, machine: Machine, step: MachineProvision) -> None:
    assert machine.vm_id is not None
    cloudspace_id = machine.pool.site.cloudspace_id
    # A start sent before may have happened although its answer was lost.
    if (machine.phase in (Phase.STARTING, Phase.FAILED) or not step.start_vm) and ctx.client.get_vm(
        cloudspace_id=cloudspace_id, vm_id=machine.vm_id
    ).status == "RUNNING":
        _running_set(machine)
        return
    if not step.start_vm:
        raise StepDropped(f"its VM {machine.vm_id} was listed running and is not")
    _phase_set(machine, Phase.STARTING)
    ctx.client.start_vm(cloudspace_id=cloudspace_id, vm_id=machine.vm_id)
    _running_set(machine)


def _running_set(machine: Machine) -> None:
    # Its node has NODE_JOIN_TIMEOUT_SECONDS from now to join (kube.nodes).
    _machine_update(
        machine,
        {
            "phase": Phase.RUNNING,
            "failure_message": "",
            "vm_started_at": timezone.now(),
            "failures": 0,
            "next_try_at": None,
            "gpu_card_refused": "",
            "gpu_card_refused_at": None,
            **WAIT_ENDED,
        },
    )


def machine_vm_replace(ctx: PassContext, machine: Machine, step: VmReplace) -> None:
    """The machine's VM vanished (deleted outside the control plane), as a listing begun
    after the VM was made shows: make sure it is gone for good, so that its vGPUs come
    free, and provision the machine anew."""
    assert machine.vm_id is not None
    old_vm = machine.vm_id
    for vm in step.remove_vms:
        vm_remove(ctx.client, cloudspace_id=vm.cloudspace_id, vm_id=vm.vm_id)
    audit_record(
        actor=ACTOR,
        action="machine.recreate",
        obj=machine,
        reason=step.reason,
        before={"vm_id": old_vm, "phase": machine.phase},
    )
    _machine_update(
        machine,
        {
            "vm_id": None,
            "vm_created_at": None,
            "vm_started_at": None,
            "phase": Phase.PENDING,
            # The new VM's node joins anew: the observer's flags are of the old VM's id.
        },
    )
    for row in VgpuReservation.objects.filter(machine=machine, vm_id=old_vm):
        model_update(
            row,
            {"vm_id": None, "state": RState.RESERVED},
            expect={"state": RState.ATTACHED, "vm_id": old_vm},
        )


# --- teardown --------------------------------------------------------------------------


def machine_teardown(ctx: PassContext, machine: Machine, step: MachineTeardown) -> None:
    """Stop the planned VMs and delete them permanently, release the planned vGPUs of the
    machine, drop it. Its first try comes at once (a provisioning's backoff is not carried
    over); a try that fails sets the next one after the machine's backoff (`retry_delay`),
    which the plan shows; a try that must wait (a listing, an outcome) does not count."""
    if machine.phase != Phase.DELETING:
        _machine_update(
            machine,
            {"phase": Phase.DELETING, "failures": 0, "next_try_at": None},
        )
    try:
        _machine_teardown(ctx, machine, step)
    except (StepFailed, ws.WhiteskyError) as exc:
        failures = machine.failures + 1
        data = {"failure_message": str(exc), "failures": failures}
        _machine_update(machine, {**data, "next_try_at": timezone.now() + retry_delay(failures)})
        raise
    except (StepWaiting, OutcomePending) as exc:
        _phase_set(machine, Phase.DELETING, str(exc))
        raise


def _machine_teardown(ctx: PassContext, machine: Machine, step: MachineTeardown) -> None:
    pool = machine.pool
    site = pool.site
    removed = set()
    for vm in step.remove_vms:
        vm_remove(ctx.client, cloudspace_id=vm.cloudspace_id, vm_id=vm.vm_id)
        removed.add(vm.vm_id)
        # The record that the VM was this machine's until now: the machine row goes, and
        # the check of whitesky's bill (billing.bills) still explains the VM's last hours.
        audit_record(
            actor=ACTOR,
            action="machine.vm_remove",
            obj=machine,
            reason="torn down",
            before={"vm_id": vm.vm_id, "name": vm.name, "location_id": site.location_id},
        )
    if machine.vm_id is not None and machine.vm_id in removed:
        _machine_update(machine, {"vm_id": None})
    if machine.vm_id is None and machine.vm_create_deadline is not None:
        # A create whose answer was lost: what it made goes first, once the plan names it.
        began, vms = ctx.vms(site, begun_after=machine.vm_create_deadline - _window(ctx))
        more = [
            f"{vm.name} ({vm.vm_id})"
            for vm in vms
            if vm.name == machine.vm_name and vm.status != "DESTROYED" and vm.vm_id not in removed
        ]
        if more:
            raise StepWaiting(f"VM {', '.join(more)} is listed now; the next pass removes it")
        if began <= machine.vm_create_deadline:
            raise StepWaiting(
                f"a create of {machine.vm_name} may still land until "
                f"{machine.vm_create_deadline:%H:%M:%S} UTC; the machine goes after that"
            )
        _machine_update(machine, {"vm_create_deadline": None})
    _pending_resolve(ctx, machine)
    planned = {release.reservation_id: release for release in step.release}
    blockers = []
    failed = False
    for row in gpus_held(machine):
        release = planned.get(row.pk)
        if release is None or release.vgpu_id != row.vgpu_id:
            blockers.append(f"{row.name}: not in the plan yet; released on the next pass")
            continue
        try:
            claimed = reservation_release(
                client=ctx.client, reservation=row, actor=ACTOR, reason=f"machine {machine} deleted"
            )
        except (ws.WhiteskyError, ValueError) as exc:
            blockers.append(f"{row.name}: {exc}")
            failed = True
            continue
        if not claimed:
            blockers.append(f"{row.name}: another worker is releasing it")
    if blockers:
        # A release refused or failed counts as a failure; one left to the next pass waits.
        raise (StepFailed if failed else StepWaiting)("; ".join(blockers))
    before = {"name": machine.name, "pool": pool.name, "vm_name": machine.vm_name}
    with transaction.atomic():  # audited once, as it goes: a cut between them does neither
        audit_record(
            actor=ACTOR, action="machine.delete", obj=machine, reason="torn down", before=before
        )
        machine.delete()


def vm_remove(client: ws.WhiteskyClient, *, cloudspace_id: str, vm_id: int) -> None:
    """Stop (a vGPU cannot be detached from a running VM), then delete permanently."""
    try:
        vm = client.get_vm(cloudspace_id=cloudspace_id, vm_id=vm_id)
    except ws.NotFound:
        return
    if vm.status == "DESTROYED":
        return
    if vm.status == "RUNNING":
        client.stop_vm(cloudspace_id=cloudspace_id, vm_id=vm_id)
    with suppress(ws.NotFound):
        client.delete_vm(
            cloudspace_id=cloudspace_id, vm_id=vm_id, permanently=True, detach_gpu=True
        )


# --- cluster deletion ------------------------------------------------------------------


def cluster_leftovers_reclaim(ctx: PassContext, cluster: Cluster, step: ClusterReclaim) -> bool:
    """After its machines: remove the VMs and release the vGPUs the step names (those that
    carry the cluster's name, in every location of the account, attached or not). The
    cluster goes only when a whole listing of each location, begun after the releases,
    shows none; what it shows beyond the step keeps it for the next pass to plan. True
    when gone."""
    machines = Machine.objects.filter(pool__cluster=cluster).order_by("name")
    if machines:
        _blockers_set(
            cluster,
            [f"machine {m.name}: {m.failure_message or 'being torn down'}" for m in machines],
        )
        return False
    if step.blocked:
        _blockers_set(
            cluster, ["its machines are gone; the next pass removes what carries its name"]
        )
        return False
    blockers: list[str] = []
    sites = {site.cloudspace_id: site.location for site in cluster.sites.select_related("location")}
    for vm in step.remove_vms:
        vm_remove(ctx.client, cloudspace_id=vm.cloudspace_id, vm_id=vm.vm_id)
        reason = f"cluster deleted: VM {vm.name} ({vm.vm_id}) carried its name"
        audit_record(actor=ACTOR, action="vm.delete", obj=cluster, reason=reason)
        if (location := sites.get(vm.cloudspace_id)) is not None:
            # Recorded as the sweep records its removals: the leak ledger tells it released.
            now = timezone.now()
            VmRemovalRequest.objects.create(
                location=location, vm_id=vm.vm_id, name=vm.name, cloudspace_id=vm.cloudspace_id,
                requested_at=now, reason=reason, attempted_at=now, done_at=now,
            )  # fmt: skip
    for release in step.release:
        row = (
            VgpuReservation.objects.select_related("location")
            .filter(pk=release.reservation_id, vgpu_id=release.vgpu_id)
            .first()
        )
        if row is None or row.state not in (RState.RESERVED, RState.ATTACHED, RState.RELEASING):
            continue  # gone or changed since the plan: the listing below tells
        try:
            reservation_release(
                client=ctx.client,
                reservation=row,
                actor=ACTOR,
                reason=f"cluster {cluster.name} deleted",
            )
        except (ws.WhiteskyError, ValueError) as exc:
            blockers.append(f"{row.name} in {row.location.name}: {exc}")
    is_ours = owned_by(cluster)
    for site in ClusterSite.objects.filter(cluster=cluster).select_related("location"):
        _, vms = ctx.vms(site)
        left = [
            f"{vm.name} ({vm.vm_id})" for vm in vms if vm.status != "DESTROYED" and is_ours(vm.name)
        ]
        if left:
            blockers.append(
                f"{site.cloudspace_id}: VM {', '.join(left)} listed; the next pass removes it"
            )
    for location in Location.objects.filter(account=cluster.account):
        _, listing = ctx.vgpus(location)
        ours = [v for v in listing.items if is_ours(v.name)]
        if ours:
            blockers.append(
                f"{location.name}: {len(ours)} vGPU(s) named for it still listed; confirming "
                "on the next pass"
            )
        elif not listing.complete:
            blockers.append(f"{location.name}: vGPU listing incomplete ({listing.error})")
    if blockers:
        _blockers_set(cluster, blockers)
        return False
    try:
        cluster_rows_delete(cluster=cluster, actor=ACTOR, reason="no reservation left")
    except InUse as exc:  # a pass over its Kubernetes holds it a moment longer
        _blockers_set(cluster, [exc.message])
        return False
    return True


def _blockers_set(cluster: Cluster, blockers: list[str]) -> None:
    # Act's own row beside the cluster's: people's writes to the cluster never meet it.
    status, made = ClusterStatus.objects.get_or_create(
        cluster=cluster, defaults={"deletion_blockers": blockers}
    )
    if not made:
        model_update(status, {"deletion_blockers": blockers})
