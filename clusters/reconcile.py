"""Plan and act for one cluster: machines to create, provision, tear down; leftovers to reclaim.

`cluster_plan` reads the database only and returns the plan as data (shown as a dry run
or on the drift page); `cluster_reconcile` applies it, one step per machine, under the
cluster's lock, so there is never more than one mutation in flight per VM.

Every step is re-entrant. A write whose answer was lost is resolved on the next pass by
looking the object up by name, in a listing fetched for that purpose only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Literal

from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from clusters.models import Cluster, ClusterSite, Location, Machine, MachinePool, VirtualMachine
from clusters.selectors import pools_by_cluster
from clusters.services import cluster_rows_delete
from gpus import naming
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import GpuUnavailable, gpu_profile_resolve
from gpus.services import (
    outcome_unknown,
    reservation_confirm_released,
    reservation_release,
    reservation_reserve_and_attach,
)

logger = logging.getLogger(__name__)
Phase = Machine.Phase
RState = VgpuReservation.State
ACTOR = "reconciler"
VM_GONE = {"DELETED", "DESTROYED"}


@dataclass(frozen=True)
class Step:
    action: Literal["create", "provision", "recreate", "delete", "reclaim"]
    target: str
    detail: str = ""


@dataclass
class ReconcileResult:
    cluster: str
    plan: list[Step]
    applied: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str = ""
    cluster_deleted: bool = False


# --- plan ------------------------------------------------------------------------------


def cluster_plan(cluster: Cluster) -> list[Step]:
    if cluster.state == Cluster.State.DELETING:
        teardowns = [
            Step("delete", m.name, "cluster is being deleted")
            for m in Machine.objects.filter(pool__cluster=cluster).order_by("name")
        ]
        return [*teardowns, Step("reclaim", cluster.name, "VMs and vGPUs with its prefix")]
    steps: list[Step] = []
    vms = _observed_vms(cluster)
    pools = cluster.pools.select_related("site__location").prefetch_related("machines")
    for pool in pools.order_by("name"):
        machines = {m.index: m for m in pool.machines.all()}
        for index in range(pool.replicas):
            machine = machines.pop(index, None)
            if machine is None:
                steps.append(Step("create", f"{pool.name}-{index}", f"pool {pool.name}"))
            elif machine.delete_requested:
                steps.append(Step("delete", machine.name, "deletion requested"))
            elif machine.phase != Phase.RUNNING:
                steps.append(Step("provision", machine.name, f"phase {machine.phase}"))
            elif _vm_vanished(machine, pool, vms):
                steps.append(Step("recreate", machine.name, "its VM is no longer listed"))
        for machine in sorted(machines.values(), key=lambda m: m.index):
            steps.append(Step("delete", machine.name, f"pool {pool.name} scaled down"))
    return steps


def _observed_vms(cluster: Cluster) -> dict[tuple[int, int], VirtualMachine]:
    locations = ClusterSite.objects.filter(cluster=cluster).values("location")
    return {
        (vm.location_id, vm.vm_id): vm
        for vm in VirtualMachine.objects.filter(location__in=locations)
    }


def _vm_vanished(
    machine: Machine, pool: MachinePool, vms: dict[tuple[int, int], VirtualMachine]
) -> bool:
    location = pool.site.location
    if machine.vm_id is None or not location.observation_complete:
        return False
    vm = vms.get((location.pk, machine.vm_id))
    return vm is None or vm.status in VM_GONE


# --- act -------------------------------------------------------------------------------


class PassContext:
    """What one pass knows beyond the mirror: fresh listings (fetched only to resolve an
    unknown outcome, at most once per object per pass) and cards with instances taken."""

    def __init__(self, client: ws.WhiteskyClient) -> None:
        self.client = client
        self._vgpus: dict[int, ws.Listing[ws.Vgpu]] = {}
        self._vms: dict[str, list[ws.Vm]] = {}
        self._cards: dict[int, list[GpuProfile]] = {}

    def vgpus(self, location: Location, *, fresh: bool = False) -> ws.Listing[ws.Vgpu]:
        if fresh or location.pk not in self._vgpus:
            self._vgpus[location.pk] = self.client.list_vgpus(location=location.name)
        return self._vgpus[location.pk]

    def vm_by_name(self, site: ClusterSite, name: str) -> ws.Vm | None:
        if site.cloudspace_id not in self._vms:
            self._vms[site.cloudspace_id] = self.client.list_vms(cloudspace_id=site.cloudspace_id)
        return next(
            (
                vm
                for vm in self._vms[site.cloudspace_id]
                if vm.name == name and vm.status not in VM_GONE
            ),
            None,
        )

    def cards(self, location: Location) -> list[GpuProfile]:
        if location.pk not in self._cards:
            self._cards[location.pk] = list(location.gpu_profiles.order_by("profile_id"))
        return self._cards[location.pk]


class StepFailed(Exception):
    """A step cannot go on until something changes; the machine fails with this message."""


class StepWaiting(Exception):
    """A step must wait for a complete observation; the machine keeps its phase."""


def cluster_reconcile(
    *, client: ws.WhiteskyClient, cluster: Cluster, dry_run: bool = False
) -> ReconcileResult:
    plan = cluster_plan(cluster)
    result = ReconcileResult(cluster=cluster.name, plan=plan)
    if dry_run or not plan:
        return result
    with object_lock(f"cluster:{cluster.pk}") as taken:
        if not taken:
            result.skipped = "another pass holds the cluster's lock"
            return result
        ctx = PassContext(client)
        for step in plan:
            try:
                _apply(ctx, cluster, step, result)
                result.applied.append(f"{step.action} {step.target}")
            except (StepFailed, StepWaiting, GpuUnavailable, ws.WhiteskyError) as exc:
                result.errors.append(f"{step.action} {step.target}: {exc}")
                logger.warning("cluster %s: %s %s: %s", cluster.name, step.action, step.target, exc)
    return result


def _apply(ctx: PassContext, cluster: Cluster, step: Step, result: ReconcileResult) -> None:
    if step.action == "reclaim":
        result.cluster_deleted = cluster_leftovers_reclaim(ctx, cluster)
        return
    if step.action == "create":
        pool_name, _, index = step.target.rpartition("-")
        pool = cluster.pools.get(name=pool_name)
        machine, _ = Machine.objects.get_or_create(
            pool=pool, index=int(index), defaults={"name": step.target}
        )
        machine_provision(ctx, machine)
        return
    machine = Machine.objects.select_related("pool__site__location", "pool__cluster").get(
        pool__cluster=cluster, name=step.target
    )
    if step.action == "recreate":
        machine_vm_replace(ctx, machine)
    if step.action in ("provision", "recreate"):
        machine_provision(ctx, machine)
    else:
        machine_teardown(ctx, machine)


# --- provisioning ----------------------------------------------------------------------


def _fail(machine: Machine, message: str) -> None:
    Machine.objects.filter(pk=machine.pk).update(phase=Phase.FAILED, failure_message=message)
    machine.phase, machine.failure_message = Phase.FAILED, message


def _set_phase(machine: Machine, phase: str, message: str = "") -> None:
    if (machine.phase, machine.failure_message) != (phase, message):
        Machine.objects.filter(pk=machine.pk).update(phase=phase, failure_message=message)
        machine.phase, machine.failure_message = phase, message


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
        card_id = _gpu_card_for(ctx, machine)
        _vm_ensure(ctx, machine)
        _gpus_ensure(ctx, machine, card_id)
        _vm_start(ctx, machine)
    except (GpuUnavailable, StepFailed) as exc:
        _fail(machine, str(exc))
        raise
    except StepWaiting as exc:
        _set_phase(machine, machine.phase, str(exc))
        raise
    except ws.WhiteskyError as exc:
        if outcome_unknown(exc):
            # Keep the phase: the next pass resolves the outcome by name.
            Machine.objects.filter(pk=machine.pk).update(failure_message=str(exc))
        else:
            _fail(machine, str(exc))
        raise


def _missing_gpus(machine: Machine) -> list[int]:
    held = set(
        VgpuReservation.objects.filter(machine=machine)
        .exclude(state=RState.RELEASED)
        .values_list("owner_index", flat=True)
    )
    return [n for n in range(machine.pool.gpu_count) if n not in held]


def _gpu_card_for(ctx: PassContext, machine: Machine) -> str:
    """The card for the machine's missing vGPUs (all on one card), before any VM exists."""
    pool = machine.pool
    missing = _missing_gpus(machine)
    if not missing:
        return ""
    location = pool.site.location
    card = gpu_profile_resolve(
        ctx.cards(location),
        location=location.name,
        count=len(missing),
        gpu_type=pool.gpu_type,
        profile_id=pool.gpu_profile_id,
    )
    return card.profile_id


def _vm_ensure(ctx: PassContext, machine: Machine) -> None:
    if machine.vm_id is not None:
        return
    pool = machine.pool
    if machine.phase != Phase.PENDING:
        # A create may have been sent before and its answer lost: look by name first.
        found = ctx.vm_by_name(pool.site, machine.vm_name)
        if found is not None:
            Machine.objects.filter(pk=machine.pk).update(vm_id=found.vm_id)
            machine.vm_id = found.vm_id
            return
    _set_phase(machine, Phase.CREATING)
    vm_id = ctx.client.create_vm(
        cloudspace_id=pool.site.cloudspace_id,
        name=machine.vm_name,
        description=f"capvco-web machine {machine} (pool {pool.name})",
        vcpus=pool.vcpus,
        memory_mib=pool.memory_mib,
        image_id=pool.site.image_id,
        disk_size_gib=pool.disk_gib,
        start=False,
        user_data=pool.user_data or None,
    )
    Machine.objects.filter(pk=machine.pk).update(vm_id=vm_id)
    machine.vm_id = vm_id


def _gpus_ensure(ctx: PassContext, machine: Machine, card_id: str) -> None:
    pool = machine.pool
    if not pool.wants_gpus:
        return
    location = pool.site.location
    for n in range(pool.gpu_count):
        name = machine.vgpu_name(n)
        row = (
            VgpuReservation.objects.filter(location=location, name=name)
            .exclude(state=RState.RELEASED)
            .first()
        )
        if row is not None and row.vgpu_id is None:
            row = _pending_resolve(ctx, row)
        if row is not None:
            _attached_ensure(ctx, machine, row)
            continue
        if machine.phase != Phase.ATTACHING:
            _set_phase(machine, Phase.ATTACHING)
        reservation_reserve_and_attach(client=ctx.client, machine=machine, n=n, gpu_id=card_id)
        for card in ctx.cards(location):
            if card.profile_id == card_id:
                card.available_instances -= 1  # what the next machine of this pass sees


def _pending_resolve(ctx: PassContext, row: VgpuReservation) -> VgpuReservation | None:
    """A reserve whose answer was lost: adopt the reservation if the listing has it."""
    listing = ctx.vgpus(row.location, fresh=True)
    found = next((v for v in listing.items if v.name == row.name), None)
    if found is not None:
        return _row_adopt(row, found)
    if not listing.complete:
        raise StepWaiting(
            f"cannot tell whether {row.name} was reserved: the vGPU listing is incomplete "
            f"({listing.error})"
        )
    row.delete()  # a whole listing without it: the reserve never happened
    return None


def _attached_ensure(ctx: PassContext, machine: Machine, row: VgpuReservation) -> None:
    if row.vm_id == machine.vm_id:
        return
    if row.vm_id is not None:
        raise StepFailed(f"{row.name} is attached to VM {row.vm_id}, not to this machine's VM")
    assert machine.vm_id is not None and row.vgpu_id is not None
    ctx.client.attach_vgpu(
        cloudspace_id=machine.pool.site.cloudspace_id, vm_id=machine.vm_id, vgpu_id=row.vgpu_id
    )
    VgpuReservation.objects.filter(pk=row.pk).update(
        vm_id=machine.vm_id, state=RState.ATTACHED, machine=machine, unassigned_since=None
    )


def _vm_start(ctx: PassContext, machine: Machine) -> None:
    assert machine.vm_id is not None
    cloudspace_id = machine.pool.site.cloudspace_id
    # A start sent before may have happened although its answer was lost.
    if (
        machine.phase in (Phase.STARTING, Phase.FAILED)
        and ctx.client.get_vm(cloudspace_id=cloudspace_id, vm_id=machine.vm_id).status == "RUNNING"
    ):
        _set_phase(machine, Phase.RUNNING)
        return
    _set_phase(machine, Phase.STARTING)
    ctx.client.start_vm(cloudspace_id=cloudspace_id, vm_id=machine.vm_id)
    _set_phase(machine, Phase.RUNNING)


def machine_vm_replace(ctx: PassContext, machine: Machine) -> None:
    """The machine's VM vanished (deleted outside the control plane): make sure it is gone
    for good, so that its vGPUs come free, and provision the machine anew."""
    assert machine.vm_id is not None
    vm_remove(ctx.client, cloudspace_id=machine.pool.site.cloudspace_id, vm_id=machine.vm_id)
    audit_record(
        actor=ACTOR,
        action="machine.recreate",
        obj=machine,
        reason="its VM was no longer listed",
        before={"vm_id": machine.vm_id, "phase": machine.phase},
    )
    Machine.objects.filter(pk=machine.pk).update(vm_id=None, phase=Phase.PENDING)
    VgpuReservation.objects.filter(machine=machine, vm_id=machine.vm_id).update(
        vm_id=None, state=RState.RESERVED
    )
    machine.vm_id, machine.phase = None, Phase.PENDING


# --- teardown --------------------------------------------------------------------------


def machine_teardown(ctx: PassContext, machine: Machine) -> None:
    """Stop the VM, delete it permanently, release every vGPU, confirm, drop the machine."""
    _set_phase(machine, Phase.DELETING, machine.failure_message)
    try:
        _machine_teardown(ctx, machine)
    except (StepFailed, ws.WhiteskyError) as exc:
        _set_phase(machine, Phase.DELETING, str(exc))
        raise


def _machine_teardown(ctx: PassContext, machine: Machine) -> None:
    pool = machine.pool
    site = pool.site
    if machine.vm_id is None:
        found = ctx.vm_by_name(site, machine.vm_name)  # a create whose answer was lost
        machine.vm_id = found.vm_id if found else None
    if machine.vm_id is not None:
        vm_remove(ctx.client, cloudspace_id=site.cloudspace_id, vm_id=machine.vm_id)
        Machine.objects.filter(pk=machine.pk).update(vm_id=None)
        machine.vm_id = None
    is_ours = _owned_by(pool.cluster, machine=machine.name)
    blockers = _reservations_release(
        ctx, site.location, is_ours, reason=f"machine {machine} deleted"
    )
    if blockers:
        raise StepFailed("; ".join(blockers))
    before = {"name": machine.name, "pool": pool.name, "vm_name": machine.vm_name}
    audit_record(
        actor=ACTOR, action="machine.delete", obj=machine, reason="torn down", before=before
    )
    machine.delete()


def _owned_by(cluster: Cluster, machine: str | None = None) -> Callable[[str], bool]:
    """Whether a VM or vGPU name belongs to the cluster (and to `machine`, if given)."""
    known = pools_by_cluster(cluster.account_id)

    def is_ours(name: str) -> bool:
        owner = naming.owner_parse(name, known)
        return (
            owner is not None
            and owner.cluster == cluster.name
            and (machine is None or owner.machine == machine)
        )

    return is_ours


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


def _reservations_release(
    ctx: PassContext, location: Location, is_ours: Callable[[str], bool], *, reason: str
) -> list[str]:
    """Release every listed reservation of `location` that `is_ours`, from a fresh listing.

    Returns what still blocks; empty once a complete listing shows none of ours left.
    """
    listing = ctx.vgpus(location, fresh=True)
    ours = [v for v in listing.items if is_ours(v.name)]
    blockers: list[str] = []
    for vgpu in ours:
        try:
            reservation_release(
                client=ctx.client, reservation=_row_for(location, vgpu), actor=ACTOR, reason=reason
            )
        except ws.WhiteskyError as exc:
            blockers.append(f"{vgpu.name} in {location.name}: {exc}")
    after = ctx.vgpus(location, fresh=True) if ours else listing
    if not after.complete:
        return [*blockers, f"{location.name}: vGPU listing incomplete ({after.error})"]
    left = [v.name for v in after.items if is_ours(v.name)]
    if left:
        blockers.append(f"{location.name}: still listed: {', '.join(left)}")
    listed = {v.vgpu_id for v in after.items}
    for row in VgpuReservation.objects.filter(location=location).exclude(state=RState.RELEASED):
        if not is_ours(row.name):
            continue
        if row.vgpu_id is None:
            row.delete()  # a whole listing without it: its reserve never happened
        else:
            reservation_confirm_released(reservation=row, listed_ids=listed)
    return blockers


def _row_for(location: Location, vgpu: ws.Vgpu) -> VgpuReservation:
    """The row of a listed reservation, made now if the mirror has not seen it yet."""
    row = VgpuReservation.objects.filter(location=location, vgpu_id=vgpu.vgpu_id).first()
    if row is None:
        row = VgpuReservation.objects.filter(
            location=location, name=vgpu.name, vgpu_id__isnull=True
        ).first()
    if row is None:
        row = VgpuReservation(location=location, name=vgpu.name)
    return _row_adopt(row, vgpu)


def _row_adopt(row: VgpuReservation, vgpu: ws.Vgpu) -> VgpuReservation:
    """Make a row (a pending one, or one the mirror lacks) say what the listing says."""
    row.vgpu_id, row.gpu_id, row.vm_id = vgpu.vgpu_id, vgpu.gpu_id, vgpu.vm_id
    if row.state in (RState.RESERVING, RState.RELEASED):
        row.state = RState.ATTACHED if vgpu.vm_id else RState.RESERVED
    row.first_seen_at = row.first_seen_at or timezone.now()
    row.last_seen_at = timezone.now()
    row.save()
    return row


# --- cluster deletion ------------------------------------------------------------------


def cluster_leftovers_reclaim(ctx: PassContext, cluster: Cluster) -> bool:
    """After its machines: remove VMs and release vGPUs that carry the cluster's prefix,
    in every location of the account, attached or not. True when the cluster is gone."""
    machines = Machine.objects.filter(pool__cluster=cluster).order_by("name")
    if machines:
        _blockers_set(
            cluster,
            [f"machine {m.name}: {m.failure_message or 'being torn down'}" for m in machines],
        )
        return False
    blockers: list[str] = []
    is_ours = _owned_by(cluster)

    for site in ClusterSite.objects.filter(cluster=cluster).select_related("location"):
        for vm in ctx.client.list_vms(cloudspace_id=site.cloudspace_id):
            if vm.status not in VM_GONE and is_ours(vm.name):
                vm_remove(ctx.client, cloudspace_id=site.cloudspace_id, vm_id=vm.vm_id)
                audit_record(
                    actor=ACTOR,
                    action="vm.delete",
                    obj=cluster,
                    reason=f"cluster deleted: VM {vm.name} ({vm.vm_id}) carried its prefix",
                )
    for location in Location.objects.filter(account=cluster.account):
        blockers += _reservations_release(
            ctx, location, is_ours, reason=f"cluster {cluster.name} deleted"
        )
    if blockers:
        _blockers_set(cluster, blockers)
        return False
    audit_record(actor=ACTOR, action="cluster.delete", obj=cluster, reason="no reservation left")
    cluster_rows_delete(cluster=cluster, actor=ACTOR, reason="no reservation left")
    return True


def _blockers_set(cluster: Cluster, blockers: list[str]) -> None:
    if cluster.deletion_blockers != blockers:
        Cluster.objects.filter(pk=cluster.pk).update(deletion_blockers=blockers)
        cluster.deletion_blockers = blockers
