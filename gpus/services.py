"""Changing vGPU reservations on whitesky: reserve-and-attach for a machine, and release.

The row is written before the call (record before acting), so that a crash or a lost
answer leaves something to resolve by name on the next pass. Every release is audited.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from capvco_web.rows import fields_assign, model_update, rows_update
from gpus import naming
from gpus.mirror import SyncCounts
from gpus.models import ListedVgpu, VgpuReservation
from gpus.selectors import released_before

if TYPE_CHECKING:
    from cloud.models import Location

State = VgpuReservation.State


RELEASABLE = (State.RESERVED, State.ATTACHED)
# A person's request that no worker has acted on yet (no claim since it was made).
PENDING_REQUESTS = Q(release_requested_at__isnull=False, state__in=RELEASABLE) & (
    Q(release_attempted_at__isnull=True) | Q(release_attempted_at__lt=F("release_requested_at"))
)


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


@dataclass(frozen=True)
class VgpuOwner:
    """The machine a vGPU is reserved for, as data: its VM and the names it gives."""

    machine_id: int
    cluster: str
    machine: str
    location_id: int
    cloudspace_id: str
    vm_id: int

    def vgpu_name(self, n: int) -> str:
        return naming.vgpu_name(self.cluster, self.machine, n)


def reservation_reserve_and_attach(
    *, client: ws.WhiteskyClient, owner: VgpuOwner, n: int, gpu_id: str
) -> VgpuReservation:
    """Reserve vGPU `n` of a machine on card `gpu_id` and attach it to the machine's VM.

    The row is written first, with the deadline after which the call can no longer land;
    only a listing begun after it may decide that the reserve never happened. A machine
    deleted meanwhile makes the row's insert fail (IntegrityError): nothing is reserved.
    """
    assert gpu_id, "a reserve needs a card"
    with transaction.atomic():
        row = VgpuReservation.objects.create(
            location_id=owner.location_id,
            name=owner.vgpu_name(n),
            gpu_id=gpu_id,
            state=State.RESERVING,
            reserve_deadline=timezone.now() + timedelta(seconds=client.outcome_window),
            machine_id=owner.machine_id,
            owner_cluster=owner.cluster,
            owner_machine=owner.machine,
            owner_index=n,
        )
    try:
        vgpu_id = client.reserve_and_attach_vgpu(
            cloudspace_id=owner.cloudspace_id, vm_id=owner.vm_id, gpu_id=gpu_id, name=row.name
        )
    except ws.WhiteskyError as exc:
        if not exc.outcome_unknown:
            row.delete()  # the server said no: nothing was reserved
        raise
    done = {
        "vgpu_id": vgpu_id,
        "state": State.ATTACHED,
        "vm_id": owner.vm_id,
        "reserve_deadline": None,
    }
    if not model_update(row, done, expect={"state": State.RESERVING}):
        row.refresh_from_db()  # an observation recorded it first
    return row


def reservation_attach(
    *, client: ws.WhiteskyClient, row: VgpuReservation, cloudspace_id: str, vm_id: int
) -> None:
    """Attach a held reservation to a VM; the row says so once whitesky answered."""
    assert row.vgpu_id is not None, "only a listed reservation can be attached"
    client.attach_vgpu(cloudspace_id=cloudspace_id, vm_id=vm_id, vgpu_id=row.vgpu_id)
    model_update(row, {"vm_id": vm_id, "state": State.ATTACHED})


def reservations_detached(*, location_id: int, vm_id: int) -> int:
    """The reservations attached to a VM we removed: attached to nothing now, still billed
    until released. Compare-and-set per row; answers how many were written."""
    written = 0
    for row in VgpuReservation.objects.filter(location_id=location_id, vm_id=vm_id):
        detached: dict[str, object] = {"vm_id": None}
        if row.state == State.ATTACHED:
            detached["state"] = State.RESERVED
        written += model_update(row, detached, expect={"vm_id": vm_id, "state": row.state})
    return written


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
    if row.pk is None:
        for field, value in data.items():
            setattr(row, field, value)
        row.save()
    else:
        model_update(row, data)
    return row


def release_lock(reservation: VgpuReservation) -> AbstractContextManager[bool]:
    """Held through every attempt to release the reservation, from its claim to its end: a
    row still `releasing` whose lock is free has no attempt in flight (its answer was lost,
    or its worker died), so it can be sent again at once."""
    return object_lock(f"vgpu-release:{reservation.pk}")


class ReleaseRefused(Exception):
    """A release that cannot happen as things stand; the message says why and what to do."""


def release_request_pending(reservation: VgpuReservation) -> bool:
    """Whether a person asked to release it and no worker has acted on that yet."""
    requested, attempted = reservation.release_requested_at, reservation.release_attempted_at
    return (
        requested is not None
        and reservation.state in RELEASABLE
        and (attempted is None or attempted < requested)
    )


def reservation_release(
    *,
    client: ws.WhiteskyClient,
    reservation: VgpuReservation,
    actor: User | AnonymousUser | SystemActor,
    reason: str,
    prepare: Callable[[], None] | None = None,
) -> bool:
    """Release a reservation (detach, permanently): the charge stops. Audited.

    An attempt holds the reservation's release lock from its claim to its end, and claims
    the row compare-and-set: `releasing`, stamped `release_attempted_at`. Of two releases
    of one row only one acts; the other returns False and does nothing. `prepare` runs
    once claimed, before the call (the orphan VM holding the reservation goes first). A
    reservation already gone counts as released. An answer makes it `released` at once.
    A lost outcome, or a worker that died, leaves it `releasing` with its lock free: the
    orphan sweep sends it again. A refusal puts the row back as whitesky still shows it
    (compare-and-set too).
    """
    if not reason.strip():
        raise ValueError("A release needs a reason.")
    if reservation.vgpu_id is None:
        raise ValueError(f"{reservation.name} has no vGPU id yet: nothing to release.")
    if reservation.state not in (*RELEASABLE, State.RELEASING):
        raise ValueError(f"{reservation.name} is {reservation.state}: nothing to release.")
    with release_lock(reservation) as taken:
        if not taken:
            return False  # another worker's attempt is in flight: that one acts
        return _release_claimed(client, reservation, actor, reason, prepare)


def _release_claimed(
    client: ws.WhiteskyClient,
    reservation: VgpuReservation,
    actor: User | AnonymousUser | SystemActor,
    reason: str,
    prepare: Callable[[], None] | None,
) -> bool:
    before = reservation_snapshot(reservation)
    seen = {"state": reservation.state, "release_attempted_at": reservation.release_attempted_at}
    claim = {"state": State.RELEASING, "release_attempted_at": timezone.now()}
    if not model_update(reservation, claim, expect=seen):
        return False  # another worker claimed it first (or it changed): that one acts
    claimed = {"state": State.RELEASING, "release_attempted_at": reservation.release_attempted_at}
    assert reservation.vgpu_id is not None  # checked by reservation_release
    action, error = "vgpu.release", ""
    try:
        if prepare is not None:
            prepare()
            reservation.refresh_from_db(fields=["vm_id"])  # its VM may be gone now
        with suppress(ws.NotFound):  # gone already: what we wanted
            client.release_vgpu(
                location=reservation.location.name,
                vgpu_id=reservation.vgpu_id,
                detach=True,
                permanently=True,
            )
        # whitesky answered: the reservation is gone and the charge stopped.
        released = {"state": State.RELEASED, "released_at": timezone.now()}
        model_update(reservation, released, expect=claimed)
    except (ws.WhiteskyError, ReleaseRefused) as exc:
        if isinstance(exc, ws.WhiteskyError) and exc.outcome_unknown:
            error = f"outcome unknown (sent again later): {exc}"
        else:
            # Nothing was released: the row says again what whitesky shows.
            action, error = "vgpu.release_refused", str(exc)
            restored = before["state"]
            if restored == State.RELEASING:
                restored = State.ATTACHED if reservation.vm_id else State.RESERVED
            model_update(reservation, {"state": restored, "release_error": error}, expect=claimed)
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
    return True


def reservations_settle(
    *,
    location: Location,
    shown: Sequence[ListedVgpu],
    complete: bool,
    pools_by_cluster: Mapping[str, Collection[str]],
    machine_ids: Mapping[tuple[str, str], int],
    listed_at: datetime,
    now: datetime,
) -> SyncCounts:
    """Bring the reservations we keep in line with what a listing begun at `listed_at`
    showed (`shown`, the mirror's rows of it; `complete` when it was whole): their vGPU id,
    card, VM and state, a row for each listed reservation we have none of (one we did not
    make, its owner parsed from the name), and, from a whole listing only, which are gone.

    Compare-and-set: a row changed after the listing began (a reserve, attach or release
    recorded while the listing was on its way) is newer than the listing, and is left as
    it is, also when it changes while this runs; the next listing tells.
    """
    listed_ids = [v.vgpu_id for v in shown]
    candidates = list(
        VgpuReservation.objects.filter(location=location).filter(
            ~Q(state=State.RELEASED) | Q(vgpu_id__in=listed_ids)
        )
    )
    rows = [row for row in candidates if row.updated_at <= listed_at]
    newer = [row for row in candidates if row.updated_at > listed_at]
    newer_ids = {row.vgpu_id for row in newer if row.vgpu_id}
    newer_names = {row.name for row in newer}
    by_id = {r.vgpu_id: r for r in rows if r.vgpu_id}
    pending_by_name = {r.name: r for r in rows if not r.vgpu_id}
    to_create: list[VgpuReservation] = []
    to_update: dict[int, VgpuReservation] = {}
    fields: set[str] = set()

    def changed(row: VgpuReservation, names_changed: list[str]) -> None:
        if names_changed and row.pk:
            fields.update(names_changed)
            to_update[row.pk] = row

    for vgpu in shown:
        if vgpu.vgpu_id in newer_ids or vgpu.name in newer_names:
            continue
        row = by_id.pop(vgpu.vgpu_id, None) or pending_by_name.pop(vgpu.name, None)
        owner = naming.owner_parse(vgpu.name, pools_by_cluster)
        data = {
            "vgpu_id": vgpu.vgpu_id,
            "name": vgpu.name,
            "gpu_id": vgpu.gpu_id,
            "vm_id": vgpu.vm_id,
            "owner_cluster": owner.cluster if owner else "",
            "owner_machine": owner.machine if owner else "",
            "owner_index": owner.index if owner else None,
            "machine_id": machine_ids.get((owner.cluster, owner.machine)) if owner else None,
            "reserve_deadline": None,
        }
        if row is None:
            row = VgpuReservation(location=location, **data)
            to_create.append(row)
        else:
            changed(row, fields_assign(row, data))
        # A release in flight stays `releasing` until the listing no longer shows it.
        if row.state != State.RELEASING:
            state = State.ATTACHED if vgpu.vm_id else State.RESERVED
            changed(row, fields_assign(row, {"state": state, "released_at": None}))

    if complete:
        # Listed nowhere in a whole listing: the reservation is gone.
        for row in by_id.values():
            if row.state != State.RELEASED:
                changed(row, fields_assign(row, {"state": State.RELEASED, "released_at": now}))

    # A reserve the whole listing lacks although it began after the call could land: it
    # never happened (whoever sent it, a machine since deleted with force included).
    never = [
        row.pk
        for row in pending_by_name.values()
        if complete and (row.reserve_deadline is None or row.reserve_deadline < listed_at)
    ]
    for row in to_update.values():
        row.updated_at = now
    # Another reservation of the name or id made meanwhile is newer: it stays as made.
    VgpuReservation.objects.bulk_create(to_create, ignore_conflicts=True)
    updated = rows_update(
        list(to_update.values()), fields | {"updated_at"}, where=Q(updated_at__lte=listed_at)
    )
    deleted = 0
    if never:
        deleted = VgpuReservation.objects.filter(
            pk__in=never, vgpu_id__isnull=True, updated_at__lte=listed_at
        ).delete()[0]
    return SyncCounts(created=len(to_create), updated=updated, deleted=deleted)


def reservations_history_prune(*, before: datetime, batch: int = 5000) -> int:
    """Delete the reservations released before `before`: history, whose releases are in
    the audit log. In batches, so no long lock holds the table. Answers how many."""
    deleted = 0
    while ids := list(released_before(before).values_list("pk", flat=True)[:batch]):
        deleted += released_before(before).filter(pk__in=ids).delete()[0]
    return deleted
