"""Changing vGPU reservations on whitesky: reserve-and-attach for a machine, and release.

The row is written before the call (record before acting), so that a crash or a lost
answer leaves something to resolve by name on the next pass. Every release is audited.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.integrations import whitesky as ws
from capvco_web.rows import model_update
from clusters.models import Machine
from gpus.models import VgpuReservation

State = VgpuReservation.State


def reservation_snapshot(row: VgpuReservation) -> dict[str, Any]:
    return {
        "name": row.name,
        "vgpu_id": row.vgpu_id,
        "state": row.state,
        "vm_id": row.vm_id,
        "location": row.location.name,
        "owner": f"{row.owner_cluster}/{row.owner_machine}".strip("/"),
        "orphaned_since": row.orphaned_since.isoformat() if row.orphaned_since else None,
    }


def reservation_reserve_and_attach(
    *, client: ws.WhiteskyClient, machine: Machine, n: int, gpu_id: str
) -> VgpuReservation:
    """Reserve vGPU `n` of a machine on card `gpu_id` and attach it to the machine's VM.

    The row is written first, with the deadline after which the call can no longer land;
    only a listing begun after it may decide that the reserve never happened.
    """
    assert machine.vm_id is not None and gpu_id, "a reserve needs a VM and a card"
    pool = machine.pool
    row = VgpuReservation.objects.create(
        location=pool.site.location,
        name=machine.vgpu_name(n),
        gpu_id=gpu_id,
        state=State.RESERVING,
        reserve_deadline=timezone.now() + timedelta(seconds=client.outcome_window),
        machine=machine,
        owner_cluster=pool.cluster.name,
        owner_machine=machine.name,
        owner_index=n,
    )
    try:
        vgpu_id = client.reserve_and_attach_vgpu(
            cloudspace_id=pool.site.cloudspace_id, vm_id=machine.vm_id, gpu_id=gpu_id, name=row.name
        )
    except ws.WhiteskyError as exc:
        if not exc.outcome_unknown:
            row.delete()  # the server said no: nothing was reserved
        raise
    done = {
        "vgpu_id": vgpu_id,
        "state": State.ATTACHED,
        "vm_id": machine.vm_id,
        "first_seen_at": timezone.now(),
        "reserve_deadline": None,
        "unassigned_since": None,
    }
    if not model_update(row, done, expect={"state": State.RESERVING}):
        row.refresh_from_db()  # an observation recorded it first
    return row


class OutcomePending(Exception):
    """A reserve whose answer was lost may still land: nothing is decided about it yet."""


def reservation_pending_resolve(
    *, row: VgpuReservation, listing: ws.Listing[ws.Vgpu], listed_at: datetime
) -> VgpuReservation | None:
    """A reserve whose answer was lost: the listed reservation when the listing has it;
    None (the row dropped) when a whole listing begun after the call's deadline lacks it;
    otherwise OutcomePending."""
    found = next((v for v in listing.items if v.name == row.name), None)
    if found is not None:
        return reservation_adopt(row, found)
    if not listing.complete:
        raise OutcomePending(
            f"cannot tell whether {row.name} was reserved: the vGPU listing is incomplete "
            f"({listing.error})"
        )
    if row.reserve_deadline is not None and listed_at <= row.reserve_deadline:
        raise OutcomePending(
            f"the reserve of {row.name} may still land until "
            f"{row.reserve_deadline:%H:%M:%S} UTC; nothing is reserved again before"
        )
    row.delete()  # a whole listing, begun after it could land, without it: never happened
    return None


def reservation_adopt(row: VgpuReservation, vgpu: ws.Vgpu) -> VgpuReservation:
    """Make a row (a pending one, or one the mirror lacks) say what the listing says."""
    data: dict[str, Any] = {
        "vgpu_id": vgpu.vgpu_id,
        "gpu_id": vgpu.gpu_id,
        "vm_id": vgpu.vm_id,
        "reserve_deadline": None,
    }
    if row.state in (State.RESERVING, State.RELEASED):
        data["state"] = State.ATTACHED if vgpu.vm_id else State.RESERVED
    data["first_seen_at"] = row.first_seen_at or timezone.now()
    if row.pk is None:
        for field, value in data.items():
            setattr(row, field, value)
        row.save()
    else:
        model_update(row, data)
    return row


def reservation_release(
    *,
    client: ws.WhiteskyClient,
    reservation: VgpuReservation,
    actor: User | AnonymousUser | str,
    reason: str,
) -> VgpuReservation:
    """Release a reservation (detach, permanently): the charge stops. Audited.

    The row goes to `releasing`; the next complete listing that no longer shows it makes
    it `released`. A reservation already gone counts as released.
    """
    if not reason.strip():
        raise ValueError("A release needs a reason.")
    if reservation.vgpu_id is None:
        raise ValueError(f"{reservation.name} has no vGPU id yet: nothing to release.")
    before = reservation_snapshot(reservation)
    live = [State.RESERVED, State.ATTACHED, State.RELEASING]
    VgpuReservation.objects.filter(pk=reservation.pk, state__in=live).update(state=State.RELEASING)
    reservation.refresh_from_db()
    if reservation.state != State.RELEASING:
        raise ValueError(f"{reservation.name} is {reservation.state}: nothing to release.")
    action, error = "vgpu.release", ""
    try:
        client.release_vgpu(
            location=reservation.location.name,
            vgpu_id=reservation.vgpu_id,
            detach=True,
            permanently=True,
        )
    except ws.NotFound:
        pass  # gone already: what we wanted
    except ws.WhiteskyError as exc:
        if not exc.outcome_unknown:
            # The server said no: nothing changed, and the row says so again.
            action, error = "vgpu.release_refused", str(exc)
            VgpuReservation.objects.filter(pk=reservation.pk).update(state=before["state"])
            reservation.refresh_from_db()
        raise
    finally:
        after = reservation_snapshot(reservation)
        audit_record(
            actor=actor,
            action=action,
            obj=reservation,
            reason=reason,
            before=before,
            after={**after, "error": error} if error else after,
        )
    return reservation


def reservation_confirm_released(*, reservation: VgpuReservation, listed_ids: set[str]) -> bool:
    """From a complete listing: a releasing reservation that is no longer listed is gone."""
    if reservation.vgpu_id in listed_ids:
        return False
    VgpuReservation.objects.filter(pk=reservation.pk).update(
        state=State.RELEASED, released_at=timezone.now(), orphaned_since=None
    )
    return True
