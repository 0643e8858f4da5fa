"""Reading vGPU reservations: orphans and releases left unconfirmed."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet

from gpus.models import BILLED_STATES, VgpuReservation

if TYPE_CHECKING:
    from cloud.models import Location

State = VgpuReservation.State


# Billed, and the listings show no machine owning it (ListedVgpu, observe's row). Only a
# listed reservation has a vGPU id: one still reserving is never an orphan.
ORPHANED = Q(listed__orphaned_since__isnull=False, state__in=BILLED_STATES)


def orphans_list(*, location: Location | None = None) -> QuerySet[VgpuReservation]:
    rows = VgpuReservation.objects.filter(ORPHANED).select_related("location__account", "listed")
    if location is not None:
        rows = rows.filter(location=location)
    return rows.order_by("listed__orphaned_since", "name")


def stalled_releases() -> Q:
    """Releases not confirmed: their answer, or their worker, was lost, or an attempt is in
    flight. The sweep sends each again unless an attempt holds its release lock."""
    return Q(state=State.RELEASING, vgpu_id__isnull=False)


def releases_stalled(*, location: Location) -> QuerySet[VgpuReservation]:
    return (
        VgpuReservation.objects.filter(stalled_releases(), location=location)
        .select_related("location__account", "release_requested_by", "listed")
        .order_by("name")
    )


def released_before(before: datetime) -> QuerySet[VgpuReservation]:
    """Reservations released before `before` (history; rows released before the release
    time was kept count from their last change)."""
    return VgpuReservation.objects.filter(
        Q(released_at__lt=before) | Q(released_at__isnull=True, updated_at__lt=before),
        state=State.RELEASED,
    )
