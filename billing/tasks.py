"""The money pass: the hour's rollup (once an hour), the leak ledger and the idle GPU
nodes. It reads our own mirror only, no whitesky or Kubernetes call, so one pass serves
every account."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from billing.idle import idle_record
from billing.leaks import leaks_record
from billing.rollups import rollups_take
from capvco_web.locks import object_lock

logger = logging.getLogger(__name__)


@shared_task
def billing_pass() -> None:
    with object_lock("billing-pass") as taken:
        if not taken:
            return  # another worker's pass is on it
        now = timezone.now()
        taken_rollups = rollups_take(now=now)
        leaks = leaks_record()
        idle = idle_record(now=now)
    if taken_rollups.hour or taken_rollups.days or leaks.opened or leaks.ended:
        logger.info(
            "billing pass: hour %s (%d cost rows, %d capacity rows), days %s, leaks "
            "opened %d, ended %d, idle GPU nodes opened %d, ended %d",
            taken_rollups.hour,
            taken_rollups.cost_rows,
            taken_rollups.capacity_rows,
            [day.date().isoformat() for day in taken_rollups.days],
            leaks.opened,
            leaks.ended,
            idle.opened,
            idle.ended,
        )
