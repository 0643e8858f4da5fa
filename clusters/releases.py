"""Releasing vGPUs, which is orchestration: the VM that holds a vGPU decides whether and
how it can go. A person's request (refused up front for a machine's GPU), and the sweep
that reclaims orphans (billed reservations and VMs that no machine owns), carries out the
releases people asked for, and sends again the releases left unconfirmed (an answer lost,
a worker that died) that no worker is attempting.

Automatic reclaim needs all of: the account allows it, the grace period is over, enough
consecutive complete listings saw the orphan, the location's last observation was
complete, and the name says it is provably ours (our prefix, and a cluster of this
account or one that exists nowhere). Anything else waits for a person. A person's request
and a release already started are carried on whatever the listing: they decide nothing
about what is gone.

The sweep is a plan too: `location_plan` says, from the database only, which VMs it
removes and which reservations it releases, with the ids and the calls (the dry run,
`GET /api/v1/locations/<id>/plan/`); `orphan_sweep` carries out exactly those steps, each
only while its rows are as planned. What carries the name of a cluster being deleted is
left to that cluster's reclaim step, so no two plans name one object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.integrations import whitesky as ws
from capvco_web.permissions import permission_require
from capvco_web.plans import Call, PassRecord, PlanStep, StepDropped, Stopwatch, plan_apply
from capvco_web.rows import model_update
from cloud.models import Location, VirtualMachine
from clusters.models import Cluster, Machine, VmRemovalRequest
from clusters.orphans import (
    VmOwner,
    VmOwners,
    other_accounts_prefixes,
    removed_since_listed,
    vm_orphans_due,
    vm_removal_undecidable,
)
from clusters.plan import VmRemoval
from clusters.reconcile import vm_remove
from gpus import naming
from gpus.models import VgpuReservation
from gpus.release_requests import release_request_check, release_request_record
from gpus.selectors import ORPHANED, orphans_list, releases_stalled, stalled_releases
from gpus.services import (
    PENDING_REQUESTS,
    RELEASABLE,
    ReleaseRefused,
    release_request_pending,
    reservation_release,
    reservations_detached,
)

State = VgpuReservation.State
ACTOR = SystemActor.ORPHAN_SWEEP
Actor = User | AnonymousUser | SystemActor


@dataclass
class SweepResult:
    released: list[str] = field(default_factory=list)  # reservations
    removed: list[str] = field(default_factory=list)  # VMs
    errors: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # changed since the plan: planned again
    record: PassRecord | None = field(default=None, compare=False, repr=False)


Origin = Literal["request", "stalled", "orphan"]


@dataclass(frozen=True)
class SweepStep:
    """One step of a location's plan: remove an orphan VM, or release one reservation
    (a person's request, a release sent again, or an orphan), with every id act needs and
    what the rows looked like when planned."""

    kind: Literal["release_vgpu", "remove_vm"]
    target: str
    reason: str
    location_id: int
    origin: Origin = "orphan"
    reservation_id: int | None = None
    vgpu_id: str = ""
    vm_row_id: int | None = None
    """remove_vm: the mirrored VM row."""
    vm: VmRemoval | None = None
    """remove_vm: the VM; release_vgpu: the orphan VM holding it, removed first."""
    seen_state: str = ""
    seen_vm_id: int | None = None
    seen_at: datetime | None = None
    """release: when the person asked (a request); remove_vm: since when it is orphaned."""
    actor_id: int | None = None
    """The person whose decision it carries out; None: `actor_name` (the sweep's)."""
    actor_name: str = ACTOR
    request_id: int | None = None
    """remove_vm asked for by a person: their request."""
    refusal: str = ""
    """release: why it will be refused (recorded on the row and audited; nothing is sent)."""
    blocked: str = ""
    """Why it is not done now (nothing is claimed or sent)."""

    def calls(self) -> tuple[Call, ...]:
        if self.blocked or self.refusal:
            return ()
        calls = self.vm.calls() if self.vm is not None else ()
        if self.kind == "release_vgpu":
            calls += (Call("deleteVGPU", self.vgpu_id),)
        return calls

    def describe(self) -> str:
        verb = "release vGPU" if self.kind == "release_vgpu" else "remove VM"
        parts = [f"{verb} {self.target}: {self.reason}"]
        if self.kind == "release_vgpu" and self.vm is not None:
            parts.append(f"its VM {self.vm} goes first")
        if self.refusal:
            parts.append(f"refused: {self.refusal}")
        if self.blocked:
            parts.append(f"blocked: {self.blocked}")
        return "; ".join(parts)


@dataclass
class LocationPlan:
    location: Location
    steps: list[SweepStep] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.steps)


def release_blocker(reservation: VgpuReservation) -> VirtualMachine | None:
    """What stands before releasing a reservation, from the database alone.

    None: nothing, it can go at once (unassigned, or on a halted VM that is not ours).
    A VM: the VM of ours that holds it and that no machine owns; that VM goes first
    (a vGPU cannot be detached from a running VM). Refused (ReleaseRefused): it holds a
    machine's GPU, which whitesky would refuse to detach while the VM runs and which the
    machine would lose otherwise; or a VM we cannot remove holds it.
    """
    name, vm_id = reservation.name, reservation.vm_id
    if vm_id is None:
        return None
    location = reservation.location
    vm = VirtualMachine.objects.filter(location=location, vm_id=vm_id).first()
    owners = VmOwners(location)
    owner = owners.of(vm.name if vm else "", vm_id)
    if owner.kind == "machine":
        raise ReleaseRefused(
            f"{name} is attached to machine {owner.machine} (VM {vm_id}): scale pool "
            f"{owner.pool} down or delete the machine"
        )
    if vm is None:
        raise ReleaseRefused(
            f"{name} is attached to VM {vm_id}, which is in no cloudspace of a cluster in "
            f"{location.name}: detach it from that VM (stopped) in whitesky first"
        )
    if owner.kind == "creating":
        raise ReleaseRefused(
            f"{name} is attached to VM {vm.name} ({vm_id}), which machine {owner.machine} "
            "may be taking over right now: try again once that machine runs or is gone"
        )
    if owner.kind == "orphan":
        return vm
    if vm.status == "RUNNING":
        raise ReleaseRefused(
            f"{name} is attached to VM {vm.name} ({vm_id}), which is not ours and runs: "
            "stop that VM, or detach the vGPU from it, first"
        )
    return None


def reservation_release_request(
    *, reservation: VgpuReservation, actor: User | AnonymousUser, reason: str
) -> VgpuReservation:
    """A person asks to release a reservation: refused at once when it cannot happen (the
    reservation's own refusals first, then what holds it), else recorded on the row (who,
    why, when) and audited. A worker carries it out: `reservation_release_task`, or the
    orphan sweep when that task never runs."""
    ask = release_request_check(reservation=reservation, actor=actor, reason=reason)
    release_blocker(reservation)  # a machine's GPU, or a VM we cannot remove, refuses it
    return release_request_record(reservation=reservation, ask=ask)


def locations_to_sweep(now: datetime) -> QuerySet[Location]:
    """Locations with something for the sweep: a person's request no worker carried out,
    a release whose outcome was lost, or (where the account allows it) an orphan."""
    here = OuterRef("pk")
    pending = VgpuReservation.objects.filter(PENDING_REQUESTS, location=here)
    stalled = VgpuReservation.objects.filter(stalled_releases(), location=here)
    orphan_vgpus = VgpuReservation.objects.filter(ORPHANED, location=here)
    orphan_vms = VirtualMachine.objects.filter(location=here, orphaned_since__isnull=False)
    auto = Q(account__orphan_auto_release=True) & (Exists(orphan_vgpus) | Exists(orphan_vms))
    removals = VmRemovalRequest.objects.filter(location=here, done_at__isnull=True)
    return Location.objects.filter(Exists(pending) | Exists(stalled) | Exists(removals) | auto)


def orphans_due(*, location: Location, now: datetime) -> list[VgpuReservation]:
    account = location.account
    if not (account.orphan_auto_release and location.observation_complete):
        return []
    rows = orphans_list(location=location).filter(
        listed__orphaned_since__lte=now - account.orphan_grace_period,
        listed__orphan_confirmations__gte=account.orphan_confirmations,
        name__startswith=naming.PREFIX,
        state__in=RELEASABLE,
        vgpu_id__isnull=False,
    )
    # Refused by whitesky lately: tried again once per grace period, not every pass.
    refused_lately = Q(release_attempted_at__gt=now - account.orphan_grace_period) & ~Q(
        release_error=""
    )
    foreign = other_accounts_prefixes(account)
    # Exact names, whatever the owner parser read: a vGPU named for a machine that exists
    # is that machine's, never an orphan to release without a person.
    machines = Machine.objects.filter(pool__cluster__account=account)
    live = {naming.vm_name(c, m) for c, m in machines.values_list("pool__cluster__name", "name")}
    return [
        row
        for row in rows.exclude(refused_lately)
        if not row.name.startswith(foreign) and row.name.rpartition("-gpu-")[0] not in live
    ]


def orphan_vm_remove(
    *,
    client: ws.WhiteskyClient,
    vm: VirtualMachine,
    actor: Actor,
    reason: str,
    request: VmRemovalRequest | None = None,
) -> None:
    """Stop and delete (permanently, vGPUs detached) a VM of ours that no machine owns,
    and record the removal (on the person's `request`, else as a removal of its own).

    Who owns it is read again now, so a VM a machine took over meanwhile is refused. The
    vGPUs it held are unassigned afterwards, still billed until they are released."""
    owner = VmOwners(vm.location).of(vm.name, vm.vm_id)
    # Not named by us: only a person's request, and only on the VM they saw.
    asked_at = request.requested_at if request is not None else None
    if refusal := _owner_refusal(vm, owner, asked_at=asked_at):
        raise ReleaseRefused(refusal)
    before = {
        "vm_id": vm.vm_id,
        "name": vm.name,
        "status": vm.status,
        "cloudspace_id": vm.cloudspace_id,
        "orphaned_since": vm.orphaned_since.isoformat() if vm.orphaned_since else None,
        "why": owner.why,
    }
    vm_remove(client, cloudspace_id=vm.cloudspace_id, vm_id=vm.vm_id)
    detached = reservations_detached(location_id=vm.location_id, vm_id=vm.vm_id)
    audit_record(
        actor=actor,
        action="vm.delete",
        obj=vm,
        reason=reason,
        before=before,
        after={"deleted": True, "vgpus_detached": detached},
    )
    if request is None:
        # Recorded as ours, beside the VM row that only observe writes: not due again
        # before a listing begun after it shows the VM again (a delete that did not happen).
        now = timezone.now()
        VmRemovalRequest.objects.create(
            location=vm.location,
            vm_id=vm.vm_id,
            name=vm.name,
            cloudspace_id=vm.cloudspace_id,
            requested_by=actor if isinstance(actor, User) else None,
            requested_at=now,
            reason=reason,
            attempted_at=now,
            done_at=now,
        )


def _vm_removal(vm: VirtualMachine) -> VmRemoval:
    return VmRemoval(vm.vm_id, vm.cloudspace_id, vm.name, vm.status)


def vm_owner_refusal(
    vm: VirtualMachine, owners: VmOwners | None = None, *, asked_at: datetime | None = None
) -> str | None:
    """Why this VM may not be removed (None: it may): it is a machine's, a machine may be
    taking it over, or it is not named by us and either no person asked for it (`asked_at`:
    when one did) or it changed since, or no complete listing has shown it since it last
    changed. `owners`: those of its location, when already read."""
    owners = owners or VmOwners(vm.location)
    return _owner_refusal(vm, owners.of(vm.name, vm.vm_id), asked_at=asked_at)


def _owner_refusal(
    vm: VirtualMachine, owner: VmOwner, *, asked_at: datetime | None = None
) -> str | None:
    if owner.kind == "machine":
        return (
            f"VM {vm.name} ({vm.vm_id}) is machine {owner.machine}'s: delete the machine, "
            f"or scale pool {owner.pool} down"
        )
    if owner.kind == "creating":
        return (
            f"VM {vm.name} ({vm.vm_id}) may be machine {owner.machine}'s, which is being "
            "made right now: try again once that machine runs or is gone"
        )
    if owner.kind == "foreign":
        if asked_at is None:
            return (
                f"VM {vm.name} ({vm.vm_id}) is not named by us: only a person removes it, "
                "on request"
            )
        return vm_removal_undecidable(vm, asked_at=asked_at)
    return None


def vm_removal_request(
    *, vm: VirtualMachine, actor: User | AnonymousUser, reason: str
) -> VmRemovalRequest:
    """A person asks to remove a VM that no machine owns: one of ours, or (admins only:
    `cloud.remove_foreign_virtualmachine`) one not named by us, made outside the control
    plane, when a complete listing begun after it last changed has shown it. Refused at
    once when it cannot happen, else recorded (who, why, when) and audited. The location's
    next sweep carries it out (sent at once by the caller, and by the beat if that message
    is lost), without the grace period automatic removal waits for, and only on the VM as
    it was when asked for."""
    if not isinstance(actor, User):
        raise ValueError("A removal request needs a signed-in person.")
    permission_require(actor, "cloud.remove_virtualmachine", vm)
    reason = reason.strip()
    if not reason:
        raise ValueError("A removal needs a reason.")
    owner = VmOwners(vm.location).of(vm.name, vm.vm_id)
    if owner.kind == "foreign":
        permission_require(actor, "cloud.remove_foreign_virtualmachine", vm)
    if refusal := _owner_refusal(vm, owner, asked_at=timezone.now()):
        raise ReleaseRefused(refusal)
    open_request = VmRemovalRequest.objects.filter(
        location=vm.location, vm_id=vm.vm_id, done_at__isnull=True
    ).first()
    if open_request is not None:
        by = open_request.requested_by
        raise ReleaseRefused(
            f"VM {vm.name}: {by.get_username() if by else 'someone'} asked for its removal "
            "already; the next sweep carries it out."
        )
    if removed_since_listed(vm):
        # The listing that still shows it began before the delete: asked again, nothing more.
        raise ReleaseRefused(
            f"VM {vm.name} was removed after the last listing began; the next listing shows "
            "it gone."
        )
    request = VmRemovalRequest.objects.create(
        location=vm.location,
        vm_id=vm.vm_id,
        name=vm.name,
        cloudspace_id=vm.cloudspace_id,
        requested_by=actor,
        requested_at=timezone.now(),
        reason=reason,
    )
    audit_record(
        actor=actor,
        action="vm.delete_requested",
        obj=vm,
        reason=reason,
        before=_vm_snapshot(vm),
        after={"removal_requested": True, "request_id": request.pk},
    )
    return request


def _vm_snapshot(vm: VirtualMachine) -> dict[str, object]:
    return {
        "vm_id": vm.vm_id,
        "name": vm.name,
        "status": vm.status,
        "cloudspace_id": vm.cloudspace_id,
        "orphaned_since": vm.orphaned_since.isoformat() if vm.orphaned_since else None,
        "changed_at": vm.changed_at.isoformat(),
    }


@dataclass
class BulkRequest:
    """What a bulk release asked for, and what it could not ask for (with why)."""

    asked: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    locations: set[int] = field(default_factory=set)


def orphans_release_request(
    *,
    actor: User | AnonymousUser,
    reason: str,
    reservations: Sequence[VgpuReservation],
    vms: Sequence[VirtualMachine],
) -> BulkRequest:
    """One reason for many orphans: each VM removal and each vGPU release is asked for,
    checked and audited on its own, VMs first (the vGPUs they hold are released after
    them). One that cannot go is reported, and the others still go."""
    if not reason.strip():
        raise ValueError("A release needs a reason.")
    outcome = BulkRequest()
    for vm in vms:
        try:
            vm_removal_request(vm=vm, actor=actor, reason=reason)
        except ReleaseRefused as exc:
            outcome.refused.append(str(exc))
        else:
            outcome.asked.append(f"VM {vm.name}")
            outcome.locations.add(vm.location_id)
    for row in reservations:
        try:
            reservation_release_request(reservation=row, actor=actor, reason=reason)
        except ReleaseRefused as exc:
            outcome.refused.append(f"{row.name}: {exc}")
        else:
            outcome.asked.append(row.name)
            outcome.locations.add(row.location_id)
    return outcome


def release_step(
    reservation: VgpuReservation,
    *,
    origin: Origin,
    actor: Actor,
    reason: str,
    removed_first: frozenset[int] = frozenset(),
) -> SweepStep:
    """The step that releases one reservation, planned from the database: the orphan VM
    holding it goes first, unless an earlier step of the plan removes it
    (`removed_first`); a release that cannot happen says why."""
    refusal = vm = None
    try:
        holder = release_blocker(reservation)
    except ReleaseRefused as exc:
        holder, refusal = None, str(exc)
    if holder is not None and holder.vm_id not in removed_first:
        vm = _vm_removal(holder)
    return SweepStep(
        "release_vgpu",
        reservation.name,
        reason,
        location_id=reservation.location_id,
        origin=origin,
        reservation_id=reservation.pk,
        vgpu_id=reservation.vgpu_id or "",
        vm=vm,
        seen_state=reservation.state,
        seen_vm_id=reservation.vm_id,
        seen_at=reservation.release_requested_at if origin == "request" else None,
        actor_id=actor.pk if isinstance(actor, User) else None,
        actor_name=actor if isinstance(actor, str) else actor.get_username(),
        refusal=refusal or "",
    )


def location_plan(location: Location, *, now: datetime | None = None) -> LocationPlan:
    """What the next sweep of the location does, from the database only: the releases
    people asked for that no worker carried out, releases whose outcome was lost, then
    due orphans (VMs first, then the reservations they held and the others)."""
    now = now or timezone.now()
    plan = LocationPlan(location)
    planned: set[int] = set()
    # VMs people asked to remove go first: a release below whose VM is one of them need
    # not remove it again.
    removals = list(VmRemovalRequest.objects.filter(location=location, done_at__isnull=True))
    if removals:
        listed = VirtualMachine.objects.filter(
            location=location, vm_id__in=[request.vm_id for request in removals]
        )
        vms = {vm.vm_id: vm for vm in listed.select_related("location")}
        owners = VmOwners(location)
        for request in removals:
            plan.steps.append(_removal_request_step(request, vms.get(request.vm_id), owners))
    removed = {step.vm.vm_id for step in plan.steps if step.vm is not None and not step.refusal}
    requests = VgpuReservation.objects.filter(PENDING_REQUESTS, location=location)
    for row in requests.select_related("location__account", "release_requested_by", "listed"):
        step = release_step(
            row,
            origin="request",
            actor=_requester(row),
            reason=row.release_reason,
            removed_first=frozenset(removed),
        )
        plan.steps.append(step)
        planned.add(row.pk)
    for row in releases_stalled(location=location):
        actor, reason = _stalled_actor(row)
        plan.steps.append(
            release_step(
                row, origin="stalled", actor=actor, reason=reason, removed_first=frozenset(removed)
            )
        )
        planned.add(row.pk)
    removed |= {step.vm.vm_id for step in plan.steps if step.vm is not None}
    # What carries the name of a cluster being deleted is its reclaim's to remove.
    deleting = tuple(
        f"{naming.PREFIX}{name}-"
        for name in Cluster.objects.filter(
            account=location.account_id, state=Cluster.State.DELETING
        ).values_list("name", flat=True)
    )
    for vm in vm_orphans_due(location=location, now=now):
        if vm.vm_id in removed or vm.name.startswith(deleting):
            continue
        reason = (
            f"orphaned since {vm.orphaned_since:%Y-%m-%d %H:%M} UTC, {vm.orphan_reason} "
            f"({vm.orphan_confirmations} complete listings), auto-release on"
        )
        plan.steps.append(
            SweepStep(
                "remove_vm",
                vm.name,
                reason,
                location_id=location.pk,
                vm_row_id=vm.pk,
                vm=_vm_removal(vm),
                seen_at=vm.orphaned_since,
            )
        )
        removed.add(vm.vm_id)
    foreign = other_accounts_prefixes(location.account)
    for row in orphans_due(location=location, now=now):
        if row.pk in planned or row.name.startswith(deleting):
            continue
        reason = (
            f"orphaned since {row.orphaned_since:%Y-%m-%d %H:%M} UTC, no owning machine "
            f"({row.orphan_confirmations} complete listings), auto-release on"
        )
        step = release_step(
            row, origin="orphan", actor=ACTOR, reason=reason, removed_first=frozenset(removed)
        )
        # Read-only first: a standing refusal is not claimed and audited every pass.
        blocked = step.refusal
        if step.vm is not None and step.vm.name.startswith(foreign):
            blocked = f"it is attached to VM {step.vm.name}, of another account"
        if blocked:
            step = SweepStep(
                "release_vgpu", row.name, reason, location_id=location.pk,
                reservation_id=row.pk, vgpu_id=row.vgpu_id or "", blocked=blocked,
            )  # fmt: skip
        plan.steps.append(step)
    return plan


def release_request_carry_out(*, client: ws.WhiteskyClient, reservation: VgpuReservation) -> bool:
    """Carry out the release a person asked for, audited as that person with their reason."""
    if not release_request_pending(reservation):
        return False
    step = release_step(
        reservation,
        origin="request",
        actor=_requester(reservation),
        reason=reservation.release_reason,
    )
    return _release_step_apply(client, step, None)


def orphan_sweep(
    *,
    client: ws.WhiteskyClient,
    location: Location,
    now: datetime | None = None,
    dry_run: bool = False,
) -> SweepResult:
    """One sweep of a location: its plan, carried out step by step through the dispatcher,
    the pass recorded. A dry run lists the plan's calls and makes none."""
    started, watch = timezone.now(), Stopwatch()
    plan = location_plan(location, now=now)

    def act(planned: PlanStep) -> None:
        assert isinstance(planned, SweepStep)
        sweep_step_act(client, planned)

    record = plan_apply(
        plan.steps, act, scope="location", scope_id=location.pk, started_at=started,
        plan_ms=watch.lap(), failures=(ws.WhiteskyError, ReleaseRefused, ValueError),
        dry_run=dry_run,
    )  # fmt: skip
    if plan.steps:
        record.save()
    result = SweepResult(record=record)
    for step, outcome in zip(plan.steps, record.outcomes, strict=True):
        if outcome.outcome == "ran":
            (result.removed if step.kind == "remove_vm" else result.released).append(step.target)
        elif outcome.outcome == "dropped":
            result.dropped.append(step.target)
        elif outcome.outcome != "planned":
            result.errors.append(f"{step.target}: {outcome.message}")
    return result


def sweep_step_act(client: ws.WhiteskyClient, step: SweepStep) -> None:
    """Carry out one step of a location's plan, if the rows are still as planned."""
    done = (
        _vm_step_apply(client, step)
        if step.kind == "remove_vm"
        else _release_step_apply(client, step, None)
    )
    if not done:
        raise StepDropped("its rows changed since the plan")


def _removal_request_step(
    request: VmRemovalRequest, vm: VirtualMachine | None, owners: VmOwners
) -> SweepStep:
    """A person's VM removal: the VM as listed now (`vm`); one listed no more closes the
    request without a call; one that is not an orphan (now) is refused, recorded and
    audited."""
    actor = request.requested_by
    common = {
        "location_id": request.location_id,
        "origin": "request",
        "request_id": request.pk,
        "seen_at": request.requested_at,
        "actor_id": actor.pk if actor else None,
        "actor_name": actor.get_username() if actor else SystemActor.DELETED_USER,
    }
    if vm is None:
        return SweepStep(
            "remove_vm",
            f"{request.name} ({request.vm_id})",
            f"{request.reason} (listed no more: the request is closed)",
            **common,  # type: ignore[arg-type]
        )
    return SweepStep(
        "remove_vm",
        vm.name,
        request.reason,
        vm_row_id=vm.pk,
        vm=_vm_removal(vm),
        refusal=vm_owner_refusal(vm, owners, asked_at=request.requested_at) or "",
        **common,  # type: ignore[arg-type]
    )


def _removal_request_apply(client: ws.WhiteskyClient, step: SweepStep) -> bool:
    """Carry out a person's removal, as that person: claimed compare-and-set, closed when
    whitesky answered or refused, left open when the outcome was lost (sent again)."""
    assert step.request_id is not None and step.seen_at is not None
    request = (
        VmRemovalRequest.objects.filter(
            pk=step.request_id, done_at__isnull=True, requested_at=step.seen_at
        )
        .select_related("location__account")
        .first()
    )
    if request is None:
        return False  # carried out or closed since the plan
    claimed = {"attempted_at": timezone.now()}
    if not model_update(request, claimed, expect={"attempted_at": request.attempted_at}):
        return False  # another worker claimed it
    vm = VirtualMachine.objects.filter(location=request.location, vm_id=request.vm_id).first()
    if vm is None or step.vm_row_id is None:
        model_update(request, {"done_at": timezone.now()})
        return step.vm_row_id is None  # gone as planned; a VM listed since: planned again
    actor = _step_actor(step)
    try:
        if step.refusal:
            raise ReleaseRefused(step.refusal)
        # Who owns it is read again there: refused as well when a machine took it over.
        orphan_vm_remove(client=client, vm=vm, actor=actor, reason=request.reason, request=request)
    except (ws.WhiteskyError, ReleaseRefused) as exc:
        lost = isinstance(exc, ws.WhiteskyError) and exc.outcome_unknown
        model_update(request, {"error": str(exc), "done_at": None if lost else timezone.now()})
        if not lost:
            audit_record(
                actor=actor,
                action="vm.delete_refused",
                obj=vm,
                reason=request.reason,
                before=_vm_snapshot(vm),
                after={"error": str(exc)},
            )
        raise
    model_update(request, {"done_at": timezone.now(), "error": ""})
    return True


def _vm_step_apply(client: ws.WhiteskyClient, step: SweepStep) -> bool:
    if step.origin == "request":
        return _removal_request_apply(client, step)
    assert step.vm is not None and step.vm_row_id is not None
    vm = (
        VirtualMachine.objects.select_related("location__account")
        .filter(pk=step.vm_row_id, vm_id=step.vm.vm_id, orphaned_since=step.seen_at)
        .first()
    )
    if vm is None or step.seen_at is None or removed_since_listed(vm):
        return False  # listed anew, taken over or removed since the plan
    orphan_vm_remove(client=client, vm=vm, actor=ACTOR, reason=step.reason)
    return True


def _release_step_apply(client: ws.WhiteskyClient, step: SweepStep, actor: Actor | None) -> bool:
    """False: the row is not as planned (claimed by another worker, released, asked for
    again): nothing is sent, and the next sweep plans it again if it is still to do."""
    assert step.reservation_id is not None
    row = (
        VgpuReservation.objects.select_related(
            "location__account", "release_requested_by", "listed"
        )
        .filter(pk=step.reservation_id, vgpu_id=step.vgpu_id)
        .first()
    )
    # Its VM removed by an earlier step of the plan leaves it unassigned: still as planned.
    states = (
        {step.seen_state, State.RESERVED}
        if step.seen_state == State.ATTACHED
        else {step.seen_state}
    )
    if row is None or row.state not in states or row.vm_id not in (None, step.seen_vm_id):
        return False
    if step.origin == "request" and (
        not release_request_pending(row) or row.release_requested_at != step.seen_at
    ):
        return False
    if step.origin == "orphan" and row.orphaned_since is None:
        return False
    try:
        holder = release_blocker(row)
    except ReleaseRefused:
        if step.origin == "orphan":
            raise  # a standing refusal: not claimed, not audited
        if not step.refusal:
            return False  # planned as possible: planned again
        holder = None
    else:
        if step.refusal:
            return False  # the refusal no longer holds: planned again
    if holder is not None and (step.vm is None or holder.vm_id != step.vm.vm_id):
        return False  # another VM holds it now

    def vm_first() -> None:
        vm = release_blocker(row)  # refused now: recorded on the row and audited
        if vm is None or step.vm is None:
            return
        if vm.vm_id != step.vm.vm_id:
            raise ReleaseRefused(f"VM {vm.name} ({vm.vm_id}) holds it now, not the one planned")
        why = vm.orphan_reason or "no machine owns it"
        orphan_vm_remove(
            client=client,
            vm=vm,
            actor=who,
            reason=f"{why}; it held {row.name}, released: {step.reason}",
        )

    who = actor if actor is not None else _step_actor(step)
    return reservation_release(
        client=client, reservation=row, actor=who, reason=step.reason, prepare=vm_first
    )


def _step_actor(step: SweepStep) -> Actor:
    if step.actor_id is not None:
        user = User.objects.filter(pk=step.actor_id).first()
        if user is not None:
            return user
        return SystemActor.DELETED_USER
    return SystemActor(step.actor_name)


def _requester(row: VgpuReservation) -> Actor:
    return row.release_requested_by or SystemActor.DELETED_USER


def _stalled_actor(row: VgpuReservation) -> tuple[Actor, str]:
    """A release sent again is the same decision: the person's, when one asked for it."""
    requested, attempted = row.release_requested_at, row.release_attempted_at
    if requested is not None and attempted is not None and attempted >= requested:
        return _requester(row), row.release_reason
    since = f" started {attempted:%Y-%m-%d %H:%M} UTC" if attempted else ""
    return ACTOR, f"sent again: the release{since} was never confirmed"
