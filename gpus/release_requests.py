"""A person's request to release a vGPU reservation: what this app alone refuses it for,
and the request recorded on the row (who, why, when) and audited.

What holds a vGPU decides whether and how it can go (a machine's VM refuses it, an orphan
VM goes first), and that is known to the app that places vGPUs on VMs: the request, its
task and its carrying out are `clusters.releases`' (`reservation_release_request`), which
calls these two around its own check. This app calls nothing above it."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.permissions import permission_require
from capvco_web.rows import model_update
from gpus.models import VgpuReservation
from gpus.services import (
    RELEASABLE,
    ReleaseRefused,
    release_request_pending,
    reservation_snapshot,
)

State = VgpuReservation.State


@dataclass(frozen=True)
class ReleaseAsk:
    """A release request this app does not refuse: by whom, and why."""

    person: User
    reason: str


def release_request_check(
    *, reservation: VgpuReservation, actor: User | AnonymousUser, reason: str
) -> ReleaseAsk:
    """What refuses a person's release request from the reservation alone (raises): no
    permission, no reason, nothing to release, asked already."""
    if not isinstance(actor, User):
        raise ValueError("A release request needs a signed-in person.")
    permission_require(actor, "gpus.release_vgpureservation", reservation)
    reason = reason.strip()
    if not reason:
        raise ValueError("A release needs a reason.")
    name = reservation.name
    if reservation.vgpu_id is None:
        raise ReleaseRefused(f"{name} has no vGPU id yet: nothing to release.")
    if reservation.state == State.RELEASING:
        raise ReleaseRefused(f"{name} is being released already.")
    if reservation.state not in RELEASABLE:
        raise ReleaseRefused(f"{name} is {reservation.state}: nothing to release.")
    if release_request_pending(reservation):
        by = reservation.release_requested_by
        raise ReleaseRefused(
            f"{name}: {by.get_username() if by else 'someone'} asked for its release already; "
            "a worker carries it out."
        )
    return ReleaseAsk(person=actor, reason=reason)


def release_request_record(*, reservation: VgpuReservation, ask: ReleaseAsk) -> VgpuReservation:
    """Record the request on the row (if it did not change meanwhile) and audit it."""
    name, actor, reason = reservation.name, ask.person, ask.reason
    before = reservation_snapshot(reservation)
    seen = {
        "state": reservation.state,
        "release_requested_at": reservation.release_requested_at,
        "release_attempted_at": reservation.release_attempted_at,
    }
    request = {
        "release_requested_at": timezone.now(),
        "release_requested_by": actor,
        "release_reason": reason,
        "release_error": "",
    }
    if not model_update(reservation, request, expect=seen):
        raise ReleaseRefused(f"{name} changed meanwhile: look at it again.")
    audit_record(
        actor=actor,
        action="vgpu.release_requested",
        obj=reservation,
        reason=reason,
        before=before,
        after=reservation_snapshot(reservation),
    )
    return reservation
