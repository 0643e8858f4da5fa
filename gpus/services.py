"""Changing vGPU reservations on whitesky: reserve-and-attach for a machine, and release.

The row is written before the call (record before acting), so that a crash or a lost
answer leaves something to resolve by name on the next pass. Every release is audited.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.integrations import whitesky as ws
from clusters.models import Machine
from gpus.models import VgpuReservation

State = VgpuReservation.State


def outcome_unknown(exc: ws.WhiteskyError) -> bool:
    """Whether a failed write may still have happened on the server."""
    return isinstance(exc, ws.ResponseLost) or exc.status is None or exc.status >= 500


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
    """Reserve vGPU `n` of a machine on card `gpu_id` and attach it to the machine's VM."""
    assert machine.vm_id is not None
    pool = machine.pool
    row = VgpuReservation.objects.create(
        location=pool.site.location,
        name=machine.vgpu_name(n),
        gpu_id=gpu_id,
        state=State.RESERVING,
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
        if not outcome_unknown(exc):
            row.delete()  # the server said no: nothing was reserved
        raise
    now = timezone.now()
    row.vgpu_id, row.state, row.vm_id = vgpu_id, State.ATTACHED, machine.vm_id
    row.first_seen_at = row.last_seen_at = now
    row.save(update_fields=["vgpu_id", "state", "vm_id", "first_seen_at", "last_seen_at"])
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
        if not outcome_unknown(exc):
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
