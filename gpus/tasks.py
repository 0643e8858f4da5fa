from __future__ import annotations

import logging

from celery import shared_task
from django.contrib.auth.models import User

from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from capvco_web.tasks import send_on_commit
from clusters.models import Location
from clusters.whitesky import whitesky_client
from gpus.models import VgpuReservation
from gpus.orphans import OrphanBlocked, orphan_release, orphan_sweep
from gpus.services import reservation_release

logger = logging.getLogger(__name__)


@shared_task
def orphan_sweep_all() -> None:
    locations = Location.objects.filter(
        account__orphan_auto_release=True, reservations__orphaned_since__isnull=False
    ).distinct()
    for location_id in locations.values_list("pk", flat=True):
        send_on_commit(orphan_sweep_location, location_id)


@shared_task
def orphan_sweep_location(location_id: int) -> None:
    location = Location.objects.select_related("account").get(pk=location_id)
    # The observe lock: no sweep while the location's listing is being rewritten.
    with object_lock(f"observe-location:{location_id}") as taken:
        if not taken:
            return
        with whitesky_client(location.account) as client:
            released, errors = orphan_sweep(client=client, location=location)
    for name in released:
        logger.info("orphan sweep %s: released %s", location.name, name)
    for error in errors:
        logger.warning("orphan sweep %s: %s", location.name, error)


@shared_task
def reservation_release_task(reservation_id: int, actor_id: int, reason: str) -> None:
    """A release a person asked for (API or admin), audited with that person as actor.

    An orphan may still hold the running VM of a force-deleted machine: that VM goes
    first (orphan_release), else whitesky refuses the detach.
    """
    row = VgpuReservation.objects.select_related("location__account").get(pk=reservation_id)
    actor = User.objects.get(pk=actor_id)
    release = orphan_release if row.orphaned_since else reservation_release
    with whitesky_client(row.location.account) as client:
        try:
            release(client=client, reservation=row, actor=actor, reason=reason)
        except (ws.WhiteskyError, OrphanBlocked, ValueError) as exc:
            # Refusals are in the audit log; a task retry would not change the answer.
            logger.warning("release of %s by %s refused: %s", row.name, actor, exc)
