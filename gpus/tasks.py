"""The release a person asked for, carried out by a worker (gpus.release_requests)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task

from capvco_web.integrations import whitesky as ws
from capvco_web.tasks import send_again_later
from capvco_web.worker_slots import account_worker_slot
from cloud.whitesky import whitesky_client
from gpus.models import VgpuReservation
from gpus.release_requests import release_orchestration
from gpus.services import ReleaseRefused, release_request_pending

logger = logging.getLogger(__name__)


@shared_task(bind=True)
def reservation_release_task(self: Task[Any, Any], reservation_id: int) -> None:
    """Carry out the release a person asked for, as recorded on the row (who, why), audited
    with that person as actor. If this message is lost, the orphan sweep does it."""
    row = (
        VgpuReservation.objects.select_related("location__account", "release_requested_by")
        .filter(pk=reservation_id)
        .first()
    )
    if row is None or not release_request_pending(row):
        return  # done already (by the sweep), or refused since
    with account_worker_slot(row.location.account_id) as slot:
        if not slot:
            send_again_later(self)
            return
        with whitesky_client(row.location.account) as client:
            try:
                release_orchestration().carry_out(client, row)
            except (ws.WhiteskyError, ReleaseRefused) as exc:
                # Refusals are on the row and in the audit log; a lost outcome is sent
                # again by the sweep: a task retry would add nothing.
                logger.warning("release of %s refused or unknown: %s", row.name, exc)
