"""Act on a cluster's plan: make machine rows, provision, replace, tear down, reclaim.

`cluster_reconcile` takes the cluster's lock only for what is the cluster's own: new
machine rows (fresh indexes, never reused), marking the surplus of a scaled-down pool,
and reclaiming a deleted cluster's leftovers. Each machine's work is `machine_reconcile`,
under that machine's own lock, re-planned from the database when it runs: the beat task
fans machines out to the worker pool, the in-process path runs them one after another.
There is never more than one mutation in flight per VM.

Every step is re-entrant. A write whose answer was lost is resolved by its name, from a
listing begun after the call could no longer land.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.counters import reconcile_step_count
from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from capvco_web.rows import model_update
from cloud.models import Location, VirtualMachine
from clusters.cloud_init import machine_user_data
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.plan import (
    VM_GONE,
    CardBook,
    Step,
    cluster_plan,
    gpus_held,
    machine_step,
    owned_by,
)
from clusters.services import cluster_rows_delete
from gpus.models import VgpuReservation
from gpus.resolve import GpuUnavailable
from gpus.services import (
    OutcomePending,
    VgpuOwner,
    reservation_adopt,
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
    plan: list[Step]
    applied: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str = ""
    cluster_deleted: bool = False


class StepFailed(Exception):
    """A step cannot go on until something changes; the machine fails with this message."""


class StepWaiting(Exception):
    """A step must wait (a listing, an outcome still in flight); the machine keeps its phase."""


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
    fan_out: Callable[[list[int]], None] | None = None,
) -> ReconcileResult:
    """Apply the cluster's plan. With `fan_out`, machines' steps are handed to it (the
    worker pool); without, they run here, one after another."""
    if dry_run:
        return ReconcileResult(cluster=cluster.name, plan=cluster_plan(cluster).steps)
    # The lock before the plan: two passes that both planned would waste one plan.
    with object_lock(f"cluster:{cluster.pk}") as taken:
        if not taken:
            return ReconcileResult(
                cluster=cluster.name, plan=[], skipped="another pass holds the cluster's lock"
            )
        plan = cluster_plan(cluster)
        result = ReconcileResult(cluster=cluster.name, plan=plan.steps)
        if not plan:
            return result
        machine_ids = _cluster_rows_apply(cluster, plan.steps)
        if fan_out is not None:
            fan_out(machine_ids)
            result.applied += [f"sent machine {pk}" for pk in machine_ids]
        else:
            ctx = PassContext(client)
            for machine_id in machine_ids:
                _merge(result, machine_reconcile(ctx, machine_id))
        if any(step.action == "reclaim" for step in plan.steps):
            try:
                result.cluster_deleted = cluster_leftovers_reclaim(PassContext(client), cluster)
                result.applied.append(f"reclaim {cluster.name}")
            except ws.WhiteskyError as exc:
                result.errors.append(f"reclaim {cluster.name}: {exc}")
    for error in result.errors:
        logger.warning("cluster %s: %s", cluster.name, error)
    return result


def _merge(result: ReconcileResult, machine: MachineResult) -> None:
    if machine.applied:
        result.applied.append(machine.applied)
    if machine.error:
        result.errors.append(machine.error)


def _cluster_rows_apply(cluster: Cluster, steps: list[Step]) -> list[int]:
    """Make the rows of new machines and mark a scaled-down pool's surplus for teardown;
    answer the machines that have work to do."""
    machine_ids: list[int] = []
    for step in steps:
        if step.action == "create":
            assert step.pool_id is not None
            machine_ids.append(machine_create(pool_id=step.pool_id).pk)
        elif step.machine_id is not None:
            if step.action == "teardown":
                Machine.objects.filter(pk=step.machine_id, delete_requested=False).update(
                    delete_requested=True, updated_at=timezone.now()
                )
            machine_ids.append(step.machine_id)
    return machine_ids


def machine_create(*, pool_id: int) -> Machine:
    """A new machine with the pool's next index. Indexes are never reused, and skip any
    that a name still listed in the mirror carries (a pool deleted and made again), so a
    new machine never adopts a VM or vGPU left by an earlier one."""
    with transaction.atomic():
        pool = MachinePool.objects.select_for_update().select_related("cluster").get(pk=pool_id)
        index = max(pool.next_index, _index_after_leftovers(pool))
        MachinePool.objects.filter(pk=pool.pk).update(next_index=index + 1)
        return Machine.objects.create(pool=pool, index=index, name=f"{pool.name}-{index}")


def _index_after_leftovers(pool: MachinePool) -> int:
    prefix = f"capvco-{pool.cluster.name}-{pool.name}-"
    names = list(
        VirtualMachine.objects.filter(name__startswith=prefix).values_list("name", flat=True)
    ) + list(
        VgpuReservation.objects.filter(name__startswith=prefix)
        .exclude(state=RState.RELEASED)
        .values_list("name", flat=True)
    )
    indexes = [
        int(head)
        for head in (name.removeprefix(prefix).split("-", 1)[0] for name in names)
        if head.isdigit()
    ]
    return max(indexes, default=-1) + 1


# --- one machine -----------------------------------------------------------------------


@dataclass
class MachineResult:
    applied: str = ""
    error: str = ""


@contextmanager
def account_slot(account_id: int) -> Iterator[bool]:
    """One of the account's call slots, if one is free: a cap on its calls in flight over
    every worker, so a large scale-up does not flood whitesky."""
    for slot in range(settings.WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT):
        with object_lock(f"account-calls:{account_id}:{slot}") as taken:
            if taken:
                yield True
                return
    yield False


def machine_reconcile(ctx: PassContext, machine_id: int) -> MachineResult:
    """Re-plan one machine from the database and apply its step, under its lock."""
    with object_lock(f"machine:{machine_id}") as taken:
        if not taken:
            return MachineResult()
        machine = (
            Machine.objects.select_related("pool__site__location__account", "pool__cluster")
            .filter(pk=machine_id)
            .first()
        )
        if machine is None:
            return MachineResult()
        step = machine_step(machine, {}, _listed_vm(machine))
        if step is None:
            return MachineResult()
        with account_slot(machine.pool.cluster.account_id) as slot:
            if not slot:
                reconcile_step_count(step.action, "busy")
                return MachineResult(error=f"{step.action} {machine.name}: account busy")
            try:
                _machine_apply(ctx, machine, step)
            except (StepWaiting, OutcomePending) as exc:
                reconcile_step_count(step.action, "waiting")
                return MachineResult(error=f"{step.action} {machine.name}: {exc}")
            except (StepFailed, GpuUnavailable, Machine.DoesNotExist, ws.WhiteskyError) as exc:
                reconcile_step_count(step.action, "error")
                return MachineResult(error=f"{step.action} {machine.name}: {exc}")
    reconcile_step_count(step.action, "applied")
    return MachineResult(applied=f"{step.action} {machine.name}")


def _listed_vm(machine: Machine) -> dict[tuple[int, int], VirtualMachine]:
    if machine.vm_id is None:
        return {}
    location_id = machine.pool.site.location_id
    vm = VirtualMachine.objects.filter(location_id=location_id, vm_id=machine.vm_id).first()
    return {(location_id, machine.vm_id): vm} if vm else {}


def _machine_apply(ctx: PassContext, machine: Machine, step: Step) -> None:
    if step.action == "teardown":
        machine_teardown(ctx, machine)
        return
    if step.action == "replace_vm":
        machine_vm_replace(ctx, machine, reason=step.reason)
    machine_provision(ctx, machine)


# --- provisioning ----------------------------------------------------------------------


def _machine_update(machine: Machine, data: Mapping[str, Any]) -> None:
    """Write the machine's row. A row deleted meanwhile (a force delete) ends the step:
    what it made so far carries the machine's name, and the orphan sweep reclaims it."""
    if not model_update(machine, data) and not Machine.objects.filter(pk=machine.pk).exists():
        raise Machine.DoesNotExist(
            f"machine {machine} was deleted meanwhile: what it made is left to the orphan sweep"
        )


def _phase_set(machine: Machine, phase: str, message: str = "") -> None:
    _machine_update(machine, {"phase": phase, "failure_message": message})


def machine_provision(ctx: PassContext, machine: Machine) -> None:
    """Create the VM halted, reserve and attach its vGPUs, then start it."""
    pool = machine.pool
    location = pool.site.location
    try:
        if pool.wants_gpus and not location.observation_complete:
            raise StepWaiting(
                f"{location.name} is not completely observed yet; no vGPU is reserved "
                "until its listing is whole"
            )
        _pending_resolve(ctx, machine)
        book = CardBook.load(location) if pool.wants_gpus else None
        if book is not None and (missing := _missing_gpus(machine)):
            book.resolve(pool, len(missing))  # no VM is made for GPUs that are not there
        _vm_ensure(ctx, machine)
        _gpus_ensure(ctx, machine, book)
        _vm_start(ctx, machine)
    except (GpuUnavailable, StepFailed) as exc:
        _phase_set(machine, Phase.FAILED, str(exc))
        raise
    except (StepWaiting, OutcomePending) as exc:
        _phase_set(machine, machine.phase, str(exc))
        raise
    except ws.WhiteskyError as exc:
        # An unknown outcome keeps the phase: the next pass resolves it by name.
        _phase_set(machine, machine.phase if exc.outcome_unknown else Phase.FAILED, str(exc))
        raise


def _missing_gpus(machine: Machine) -> list[int]:
    held = {row.owner_index for row in gpus_held(machine)}
    return [n for n in range(machine.pool.gpu_count) if n not in held]


def _pending_resolve(ctx: PassContext, machine: Machine) -> None:
    """Reserves of this machine whose answers were lost: adopted, forgotten, or waited for."""
    pending = [row for row in gpus_held(machine) if row.vgpu_id is None]
    location = machine.pool.site.location
    for row in pending:
        after = row.reserve_deadline
        began, listing = ctx.vgpus(location, begun_after=after)
        reservation_pending_resolve(row=row, listing=listing, listed_at=began)


def _vm_ensure(ctx: PassContext, machine: Machine) -> None:
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
    _machine_update(
        machine,
        {
            "phase": Phase.CREATING,
            "vm_create_deadline": timezone.now() + _window(ctx),
            "gpu_driver_version": pool.gpu_driver_version if pool.wants_gpus else "",
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


def _gpus_ensure(ctx: PassContext, machine: Machine, book: CardBook | None) -> None:
    pool = machine.pool
    if book is None:
        return
    for row in gpus_held(machine):
        _attached_ensure(ctx, machine, row)
    missing = _missing_gpus(machine)
    refused: set[str] = set()
    while missing:
        card_id = book.resolve(pool, len(missing), excluded=frozenset(refused))
        _phase_set(machine, Phase.ATTACHING)
        try:
            for n in list(missing):
                _reserve_and_attach(ctx, machine, n, card_id)
                book.take(card_id, 1)
                missing.remove(n)
        except ws.CapacityExhausted:
            refused.add(card_id)  # taken since the listing (another worker): try another


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


def _attached_ensure(ctx: PassContext, machine: Machine, row: VgpuReservation) -> None:
    if row.vm_id == machine.vm_id:
        return
    if row.vm_id is not None:
        raise StepFailed(f"{row.name} is attached to VM {row.vm_id}, not to this machine's VM")
    assert machine.vm_id is not None and row.vgpu_id is not None
    _phase_set(machine, Phase.ATTACHING)
    ctx.client.attach_vgpu(
        cloudspace_id=machine.pool.site.cloudspace_id, vm_id=machine.vm_id, vgpu_id=row.vgpu_id
    )
    model_update(
        row,
        {"vm_id": machine.vm_id, "state": RState.ATTACHED, "unassigned_since": None},
    )


def _vm_start(ctx: PassContext, machine: Machine) -> None:
    assert machine.vm_id is not None
    cloudspace_id = machine.pool.site.cloudspace_id
    # A start sent before may have happened although its answer was lost.
    if (
        machine.phase in (Phase.STARTING, Phase.FAILED)
        and ctx.client.get_vm(cloudspace_id=cloudspace_id, vm_id=machine.vm_id).status == "RUNNING"
    ):
        _running_set(machine)
        return
    _phase_set(machine, Phase.STARTING)
    ctx.client.start_vm(cloudspace_id=cloudspace_id, vm_id=machine.vm_id)
    _running_set(machine)


def _running_set(machine: Machine) -> None:
    # Its node has NODE_JOIN_TIMEOUT_SECONDS from now to join (clusters.nodes).
    _machine_update(
        machine, {"phase": Phase.RUNNING, "failure_message": "", "vm_started_at": timezone.now()}
    )


def machine_vm_replace(ctx: PassContext, machine: Machine, *, reason: str) -> None:
    """The machine's VM vanished (deleted outside the control plane), as a listing begun
    after the VM was made shows: make sure it is gone for good, so that its vGPUs come
    free, and provision the machine anew."""
    assert machine.vm_id is not None
    old_vm = machine.vm_id
    vm_remove(ctx.client, cloudspace_id=machine.pool.site.cloudspace_id, vm_id=old_vm)
    audit_record(
        actor=ACTOR,
        action="machine.recreate",
        obj=machine,
        reason=reason,
        before={"vm_id": old_vm, "phase": machine.phase},
    )
    _machine_update(
        machine,
        {
            "vm_id": None,
            "vm_created_at": None,
            "vm_started_at": None,
            "phase": Phase.PENDING,
            # The new VM's node joins anew.
            "node_joined_at": None,
            "node_missing": False,
            "node_missing_reason": "",
        },
    )
    for row in VgpuReservation.objects.filter(machine=machine, vm_id=old_vm):
        model_update(
            row,
            {"vm_id": None, "state": RState.RESERVED},
            expect={"state": RState.ATTACHED, "vm_id": old_vm},
        )


# --- teardown --------------------------------------------------------------------------


def machine_teardown(ctx: PassContext, machine: Machine) -> None:
    """Stop the VM, delete it permanently, release every vGPU of the machine, drop it."""
    _phase_set(machine, Phase.DELETING, machine.failure_message)
    try:
        _machine_teardown(ctx, machine)
    except (StepFailed, StepWaiting, OutcomePending, ws.WhiteskyError) as exc:
        _phase_set(machine, Phase.DELETING, str(exc))
        raise


def _machine_teardown(ctx: PassContext, machine: Machine) -> None:
    pool = machine.pool
    site = pool.site
    if machine.vm_id is None and machine.vm_create_deadline is not None:
        began, vms = ctx.vms(site, begun_after=machine.vm_create_deadline - _window(ctx))
        for vm in vms:  # a create whose answer was lost: remove what it made
            if vm.name == machine.vm_name and vm.status != "DESTROYED":
                vm_remove(ctx.client, cloudspace_id=site.cloudspace_id, vm_id=vm.vm_id)
        if began <= machine.vm_create_deadline:
            raise StepWaiting(
                f"a create of {machine.vm_name} may still land until "
                f"{machine.vm_create_deadline:%H:%M:%S} UTC; the machine goes after that"
            )
        _machine_update(machine, {"vm_create_deadline": None})
    if machine.vm_id is not None:
        vm_remove(ctx.client, cloudspace_id=site.cloudspace_id, vm_id=machine.vm_id)
        _machine_update(machine, {"vm_id": None})
    _pending_resolve(ctx, machine)
    blockers = []
    for row in gpus_held(machine):
        try:
            claimed = reservation_release(
                client=ctx.client, reservation=row, actor=ACTOR, reason=f"machine {machine} deleted"
            )
        except (ws.WhiteskyError, ValueError) as exc:
            blockers.append(f"{row.name}: {exc}")
            continue
        if not claimed:
            blockers.append(f"{row.name}: another worker is releasing it")
    if blockers:
        raise StepFailed("; ".join(blockers))
    before = {"name": machine.name, "pool": pool.name, "vm_name": machine.vm_name}
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


def cluster_leftovers_reclaim(ctx: PassContext, cluster: Cluster) -> bool:
    """After its machines: remove VMs and release vGPUs that carry the cluster's name, in
    every location of the account, attached or not. The cluster goes only when a whole
    listing of each location, begun after the last release, shows none. True when gone."""
    machines = Machine.objects.filter(pool__cluster=cluster).order_by("name")
    if machines:
        _blockers_set(
            cluster,
            [f"machine {m.name}: {m.failure_message or 'being torn down'}" for m in machines],
        )
        return False
    blockers: list[str] = []
    is_ours = owned_by(cluster)
    for site in ClusterSite.objects.filter(cluster=cluster).select_related("location"):
        _, vms = ctx.vms(site)
        for vm in vms:
            if vm.status != "DESTROYED" and is_ours(vm.name):
                vm_remove(ctx.client, cloudspace_id=site.cloudspace_id, vm_id=vm.vm_id)
                audit_record(
                    actor=ACTOR,
                    action="vm.delete",
                    obj=cluster,
                    reason=f"cluster deleted: VM {vm.name} ({vm.vm_id}) carried its name",
                )
    for location in Location.objects.filter(account=cluster.account):
        _, listing = ctx.vgpus(location)
        ours = [v for v in listing.items if is_ours(v.name)]
        for vgpu in ours:
            try:
                reservation_release(
                    client=ctx.client,
                    reservation=_row_for(location, vgpu),
                    actor=ACTOR,
                    reason=f"cluster {cluster.name} deleted",
                )
            except (ws.WhiteskyError, ValueError) as exc:
                blockers.append(f"{vgpu.name} in {location.name}: {exc}")
        if ours:
            blockers.append(f"{location.name}: released {len(ours)}; confirming on the next pass")
        elif not listing.complete:
            blockers.append(f"{location.name}: vGPU listing incomplete ({listing.error})")
    if blockers:
        _blockers_set(cluster, blockers)
        return False
    cluster_rows_delete(cluster=cluster, actor=ACTOR, reason="no reservation left")
    return True


def _row_for(location: Location, vgpu: ws.Vgpu) -> VgpuReservation:
    """The row of a listed reservation, made now if the mirror has not seen it yet."""
    row = VgpuReservation.objects.filter(location=location, vgpu_id=vgpu.vgpu_id).first()
    if row is None:
        row = VgpuReservation.objects.filter(
            location=location, name=vgpu.name, vgpu_id__isnull=True
        ).first()
    return reservation_adopt(row or VgpuReservation(location=location, name=vgpu.name), vgpu)


def _blockers_set(cluster: Cluster, blockers: list[str]) -> None:
    model_update(cluster, {"deletion_blockers": blockers})
