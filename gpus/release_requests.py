"""A person's request to release a vGPU reservation, and the worker that carries it out.

The request is refused up front when it cannot happen, else recorded on the row (who,
why, when) and audited; `reservation_release_task` carries it out, or the orphan sweep
when that task never runs. What holds a vGPU decides whether and how it can go (a
machine's VM refuses it, an orphan VM goes first), and that is known above this app: the
app that places vGPUs on VMs says it once, from its AppConfig.ready()
(`release_orchestration_set`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.integrations import whitesky as ws
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
class ReleaseOrchestration:
    # Raises ReleaseRefused when the reservation cannot go now (from the database alone).
    refusal_check: Callable[[VgpuReservation], object]
    # Carries out a pending request with a client of the reservation's account: False when
    # another worker had claimed it.
    carry_out: Callable[[ws.WhiteskyClient, VgpuReservation], bool]


_orchestration: list[ReleaseOrchestration] = []


def release_orchestration_set(orchestration: ReleaseOrchestration) -> None:
    _orchestration[:] = [orchestration]


def release_orchestration() -> ReleaseOrchestration:
    if not _orchestration:
        raise LookupError("No app placed vGPUs on VMs: nobody says how a release goes.")
    return _orchestration[0]


def reservation_release_request(
    *, reservation: VgpuReservation, actor: User | AnonymousUser, reason: str
) -> VgpuReservation:
    """A person asks to release a reservation: refused at once when it cannot happen,
    else recorded on the row (who, why, when) and audited. A worker carries it out: the
    task sent after this, or the orphan sweep when that task never runs."""
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
    release_orchestration().refusal_check(reservation)
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
