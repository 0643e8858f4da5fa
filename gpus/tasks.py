from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from capvco_web.tasks import send_on_commit
from clusters.models import Location, VirtualMachine
from clusters.whitesky import whitesky_client
from gpus.models import VgpuReservation
from gpus.orphans import orphan_sweep, release_request_carry_out, stalled_releases
from gpus.services import PENDING_REQUESTS, ReleaseRefused, release_request_pending

logger = logging.getLogger(__name__)


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


@shared_task
def orphan_sweep_all() -> None:
    """Sent by beat: the requests and releases it carries on depend on no other message."""
    for location_id in locations_to_sweep(timezone.now()).values_list("pk", flat=True):
        send_on_commit(orphan_sweep_location, location_id)


@shared_task
def orphan_sweep_location(location_id: int) -> None:
    location = Location.objects.select_related("account").get(pk=location_id)
    # The observe lock: no sweep while the location's listing is being rewritten.
    with object_lock(f"observe-location:{location_id}") as taken:
        if not taken:
            return
        with whitesky_client(location.account) as client:
            result = orphan_sweep(client=client, location=location)
    for name in result.removed:
        logger.info("orphan sweep %s: removed VM %s", location.name, name)
    for name in result.released:
        logger.info("orphan sweep %s: released %s", location.name, name)
    for error in result.errors:
        logger.warning("orphan sweep %s: %s", location.name, error)


@shared_task
def reservation_release_task(reservation_id: int) -> None:
    """Carry out the release a person asked for, as recorded on the row (who, why), audited
    with that person as actor. If this message is lost, the orphan sweep does it."""
    row = (
        VgpuReservation.objects.select_related("location__account", "release_requested_by")
        .filter(pk=reservation_id)
        .first()
    )
    if row is None or not release_request_pending(row):
        return  # done already (by the sweep), or refused since
    with whitesky_client(row.location.account) as client:
        try:
            release_request_carry_out(client=client, reservation=row)
        except (ws.WhiteskyError, ReleaseRefused) as exc:
            # Refusals are on the row and in the audit log; a lost outcome is sent again by
            # the sweep: a task retry would add nothing.
            logger.warning("release of %s refused or unknown: %s", row.name, exc)
