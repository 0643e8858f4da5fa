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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.integrations import whitesky as ws
from capvco_web.rows import model_update
from cloud.models import Location, VirtualMachine
from clusters.models import Machine
from clusters.orphans import VmOwners, other_accounts_prefixes, vm_orphans_due
from clusters.reconcile import vm_remove
from gpus import naming
from gpus.models import VgpuReservation
from gpus.selectors import orphans_list, releases_stalled, stalled_releases
from gpus.services import (
    PENDING_REQUESTS,
    RELEASABLE,
    ReleaseRefused,
    release_request_pending,
    reservation_release,
)

State = VgpuReservation.State
ACTOR = SystemActor.ORPHAN_SWEEP
Actor = User | AnonymousUser | SystemActor


@dataclass
class SweepResult:
    released: list[str] = field(default_factory=list)  # reservations
    removed: list[str] = field(default_factory=list)  # VMs
    errors: list[str] = field(default_factory=list)


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


def locations_to_sweep(now: datetime) -> QuerySet[Location]:
    """Locations with something for the sweep: a person's request no worker carried out,
    a release whose outcome was lost, or (where the account allows it) an orphan."""
    here = OuterRef("pk")
    pending = VgpuReservation.objects.filter(PENDING_REQUESTS, location=here)
    stalled = VgpuReservation.objects.filter(stalled_releases(), location=here)
    orphan_vgpus = VgpuReservation.objects.filter(location=here, orphaned_since__isnull=False)
    orphan_vms = VirtualMachine.objects.filter(location=here, orphaned_since__isnull=False)
    auto = Q(account__orphan_auto_release=True) & (Exists(orphan_vgpus) | Exists(orphan_vms))
    return Location.objects.filter(Exists(pending) | Exists(stalled) | auto)


def orphans_due(*, location: Location, now: datetime) -> list[VgpuReservation]:
    account = location.account
    if not (account.orphan_auto_release and location.observation_complete):
        return []
    rows = orphans_list(location=location).filter(
        orphaned_since__lte=now - account.orphan_grace_period,
        orphan_confirmations__gte=account.orphan_confirmations,
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
    *, client: ws.WhiteskyClient, vm: VirtualMachine, actor: Actor, reason: str
) -> None:
    """Stop and delete (permanently, vGPUs detached) a VM of ours that no machine owns.

    Who owns it is read again now, so a VM a machine took over meanwhile is refused. The
    vGPUs it held are unassigned afterwards, still billed until they are released."""
    owner = VmOwners(vm.location).of(vm.name, vm.vm_id)
    if owner.kind != "orphan":
        what = f"machine {owner.machine}'s" if owner.machine else "not our"
        raise ReleaseRefused(f"VM {vm.name} ({vm.vm_id}) is {what} VM, not an orphan")
    before = {
        "vm_id": vm.vm_id,
        "name": vm.name,
        "status": vm.status,
        "cloudspace_id": vm.cloudspace_id,
        "orphaned_since": vm.orphaned_since.isoformat() if vm.orphaned_since else None,
        "why": owner.why,
    }
    vm_remove(client, cloudspace_id=vm.cloudspace_id, vm_id=vm.vm_id)
    audit_record(actor=actor, action="vm.delete", obj=vm, reason=reason, before=before)
    for row in VgpuReservation.objects.filter(location=vm.location, vm_id=vm.vm_id):
        detached: dict[str, object] = {"vm_id": None}
        if row.state == State.ATTACHED:
            detached["state"] = State.RESERVED
        model_update(row, detached, expect={"vm_id": vm.vm_id, "state": row.state})
    # Not due again before a listing shows it again (a delete that did not happen).
    seen = {"orphaned_since": vm.orphaned_since, "orphan_confirmations": vm.orphan_confirmations}
    model_update(vm, {"orphaned_since": None, "orphan_confirmations": 0}, expect=seen)


def release_carry_out(
    *, client: ws.WhiteskyClient, reservation: VgpuReservation, actor: Actor, reason: str
) -> bool:
    """Release a reservation for a person or the sweep, in one step: once the row is
    claimed, the orphan VM that holds it goes first; a machine's VM, or a running VM that
    is not ours, makes it a refusal (recorded on the row and audited). False: another
    worker had claimed it."""

    def vm_first() -> None:
        vm = release_blocker(reservation)
        if vm is not None:
            why = vm.orphan_reason or "no machine owns it"
            orphan_vm_remove(
                client=client,
                vm=vm,
                actor=actor,
                reason=f"{why}; it held {reservation.name}, released: {reason}",
            )

    return reservation_release(
        client=client, reservation=reservation, actor=actor, reason=reason, prepare=vm_first
    )


def release_request_carry_out(*, client: ws.WhiteskyClient, reservation: VgpuReservation) -> bool:
    """Carry out the release a person asked for, audited as that person with their reason."""
    if not release_request_pending(reservation):
        return False
    return release_carry_out(
        client=client,
        reservation=reservation,
        actor=_requester(reservation),
        reason=reservation.release_reason,
    )


def orphan_sweep(
    *, client: ws.WhiteskyClient, location: Location, now: datetime | None = None
) -> SweepResult:
    """One pass over a location: people's requests, stalled releases, then due orphans
    (VMs first, then the reservations they held and the others)."""
    now = now or timezone.now()
    result = SweepResult()

    def attempt(name: str, act: Callable[[], bool], done: list[str]) -> None:
        try:
            if act():
                done.append(name)
        except (ws.WhiteskyError, ReleaseRefused, ValueError) as exc:
            result.errors.append(f"{name}: {exc}")

    requests = VgpuReservation.objects.filter(PENDING_REQUESTS, location=location)
    for row in requests.select_related("location__account", "release_requested_by"):
        attempt(
            row.name,
            partial(release_request_carry_out, client=client, reservation=row),
            result.released,
        )

    for row in releases_stalled(location=location):
        actor, reason = _stalled_actor(row)
        again = partial(
            release_carry_out, client=client, reservation=row, actor=actor, reason=reason
        )
        attempt(row.name, again, result.released)

    for vm in vm_orphans_due(location=location, now=now):
        reason = (
            f"orphaned since {vm.orphaned_since:%Y-%m-%d %H:%M} UTC, {vm.orphan_reason} "
            f"({vm.orphan_confirmations} complete listings), auto-release on"
        )
        attempt(vm.name, partial(_vm_remove, client=client, vm=vm, reason=reason), result.removed)

    foreign = other_accounts_prefixes(location.account)
    for row in orphans_due(location=location, now=now):
        try:
            # Read-only first: a standing refusal is not claimed and audited every pass.
            holder = release_blocker(row)
            if holder is not None and holder.name.startswith(foreign):
                raise ReleaseRefused(f"it is attached to VM {holder.name}, of another account")
        except ReleaseRefused as exc:
            result.errors.append(f"{row.name}: {exc}")
            continue
        reason = (
            f"orphaned since {row.orphaned_since:%Y-%m-%d %H:%M} UTC, no owning machine "
            f"({row.orphan_confirmations} complete listings), auto-release on"
        )
        release = partial(
            release_carry_out, client=client, reservation=row, actor=ACTOR, reason=reason
        )
        attempt(row.name, release, result.released)
    return result


def _vm_remove(*, client: ws.WhiteskyClient, vm: VirtualMachine, reason: str) -> bool:
    orphan_vm_remove(client=client, vm=vm, actor=ACTOR, reason=reason)
    return True


def _requester(row: VgpuReservation) -> Actor:
    return row.release_requested_by or SystemActor.DELETED_USER


def _stalled_actor(row: VgpuReservation) -> tuple[Actor, str]:
    """A release sent again is the same decision: the person's, when one asked for it."""
    requested, attempted = row.release_requested_at, row.release_attempted_at
    if requested is not None and attempted is not None and attempted >= requested:
        return _requester(row), row.release_reason
    since = f" started {attempted:%Y-%m-%d %H:%M} UTC" if attempted else ""
    return ACTOR, f"sent again: the release{since} was never confirmed"
