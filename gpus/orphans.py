"""Orphans: billed reservations that no machine owns. Shown with their cost; reclaimed.

A reservation is released automatically only when the account allows it, after the grace
period, after enough consecutive complete listings, from a completely observed location,
and only when its name says it is ours. Anything else waits for a person.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.integrations import whitesky as ws
from clusters.models import Location, Machine, VirtualMachine
from clusters.reconcile import vm_remove
from clusters.selectors import pools_by_cluster
from gpus import naming
from gpus.models import VgpuReservation
from gpus.services import reservation_release

State = VgpuReservation.State
ACTOR = "orphan-sweep"


def orphans_list(*, location: Location | None = None) -> QuerySet[VgpuReservation]:
    rows = VgpuReservation.objects.filter(
        orphaned_since__isnull=False, state__in=[State.RESERVED, State.ATTACHED, State.RELEASING]
    ).select_related("location__account")
    if location is not None:
        rows = rows.filter(location=location)
    return rows.order_by("orphaned_since", "name")


def orphans_due(*, location: Location, now: datetime) -> QuerySet[VgpuReservation]:
    account = location.account
    if not (account.orphan_auto_release and location.observation_complete):
        return VgpuReservation.objects.none()
    return orphans_list(location=location).filter(
        orphaned_since__lte=now - account.orphan_grace_period,
        orphan_confirmations__gte=account.orphan_confirmations,
        name__startswith=naming.PREFIX,
        state__in=[State.RESERVED, State.ATTACHED],
        vgpu_id__isnull=False,
    )


def orphan_sweep(
    *, client: ws.WhiteskyClient, location: Location, now: datetime | None = None
) -> tuple[list[str], list[str]]:
    """Release the orphans that are due; returns (released names, errors)."""
    released: list[str] = []
    errors: list[str] = []
    for row in orphans_due(location=location, now=now or timezone.now()):
        reason = (
            f"orphaned since {row.orphaned_since:%Y-%m-%d %H:%M} UTC, no owning machine "
            f"({row.orphan_confirmations} complete listings), auto-release on"
        )
        try:
            orphan_release(client=client, reservation=row, actor=ACTOR, reason=reason)
            released.append(row.name)
        except (ws.WhiteskyError, OrphanBlocked) as exc:
            errors.append(f"{row.name}: {exc}")
    return released, errors


def orphan_release(
    *,
    client: ws.WhiteskyClient,
    reservation: VgpuReservation,
    actor: User | AnonymousUser | str,
    reason: str,
) -> VgpuReservation:
    """Release an orphan, by the sweep or by a person. One still attached to the VM a
    force-deleted machine left behind cannot be detached while that VM runs, so the VM
    goes first (only when it is ours and has no machine). Both steps are audited."""
    if not reason.strip():
        raise ValueError("A release needs a reason.")
    if reservation.vm_id is not None:
        _orphan_vm_remove(
            client, location=reservation.location, vm_id=reservation.vm_id, actor=actor
        )
    return reservation_release(client=client, reservation=reservation, actor=actor, reason=reason)


class OrphanBlocked(Exception):
    """The orphan is attached to a VM that is not ours to remove."""


def _orphan_vm_remove(
    client: ws.WhiteskyClient,
    *,
    location: Location,
    vm_id: int,
    actor: User | AnonymousUser | str,
) -> None:
    """An orphan attached to a VM: the VM may go only when it is ours and has no machine
    (a machine deleted with force leaves its VM behind)."""
    vm = VirtualMachine.objects.filter(location=location, vm_id=vm_id).first()
    if vm is None:
        raise OrphanBlocked(f"attached to VM {vm_id}, which is in no cluster cloudspace")
    owner = naming.owner_parse(vm.name, pools_by_cluster(location.account_id))
    if owner is None:
        raise OrphanBlocked(f"attached to VM {vm.name}, which is not ours")
    if Machine.objects.filter(pool__cluster__name=owner.cluster, name=owner.machine).exists():
        raise OrphanBlocked(f"attached to VM {vm.name}, whose machine still exists")
    vm_remove(client, cloudspace_id=vm.cloudspace_id, vm_id=vm_id)
    audit_record(
        actor=actor,
        action="vm.delete",
        obj=vm,
        reason=f"held orphaned vGPUs and belongs to no machine ({vm.name})",
        before={"vm_id": vm_id, "name": vm.name, "status": vm.status},
    )
