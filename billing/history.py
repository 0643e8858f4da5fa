"""How long the money history is kept (capvco_web.retention prunes it once a day):

* hourly rollups (label sets' too), and the hourly checks of the bill,
  `COST_HOURLY_HISTORY_DAYS` (60): only hours of days already summed into day rows are
  deleted;
* day rollups, ended leaks and ended idle spells, `COST_HISTORY_DAYS` (400), so a year
  compares with the year before; a month's rows once its last day is gone.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet

from billing.models import (
    BillCheck,
    CapacityRollup,
    CostRollup,
    IdleSpell,
    LabelCostRollup,
    Leak,
    Rollup,
    Step,
)
from billing.rollups import month_of
from capvco_web.retention import History


def _hourly(before: datetime) -> list[QuerySet]:  # type: ignore[type-arg]
    checks = BillCheck.objects.filter(start__lt=before)
    newest = Rollup.objects.filter(step=Step.DAY).order_by("-start").first()
    if newest is None:
        return [checks]  # no day summed yet: every hour stays
    # Hours of a day not yet summed stay, whatever their age.
    cut = min(before, newest.start + timedelta(days=1))
    return [
        CostRollup.objects.filter(step=Step.HOUR, start__lt=cut),
        LabelCostRollup.objects.filter(step=Step.HOUR, start__lt=cut),
        CapacityRollup.objects.filter(step=Step.HOUR, start__lt=cut),
        Rollup.objects.filter(step=Step.HOUR, start__lt=cut),
        checks,
    ]


def _daily(before: datetime) -> list[QuerySet]:  # type: ignore[type-arg]
    months = month_of(before)  # months that ended before the month of `before`
    return [
        CostRollup.objects.filter(step=Step.DAY, start__lt=before),
        LabelCostRollup.objects.filter(step=Step.DAY, start__lt=before),
        CapacityRollup.objects.filter(step=Step.DAY, start__lt=before),
        CostRollup.objects.filter(step=Step.MONTH, start__lt=months),
        LabelCostRollup.objects.filter(step=Step.MONTH, start__lt=months),
        CapacityRollup.objects.filter(step=Step.MONTH, start__lt=months),
        Rollup.objects.filter(step=Step.DAY, start__lt=before),
        Leak.objects.filter(ended_at__lt=before),
        IdleSpell.objects.filter(ended_at__lt=before),
    ]


def _count(sets: list[QuerySet]) -> int:  # type: ignore[type-arg]
    return sum(rows.count() for rows in sets)


def _prune(sets: list[QuerySet], batch: int) -> int:  # type: ignore[type-arg]
    deleted = 0
    for rows in sets:
        while ids := list(rows.values_list("pk", flat=True)[:batch]):
            deleted += rows.model.objects.filter(pk__in=ids).delete()[0]
    return deleted


HOURLY = History(
    name="hourly cost and capacity rollups and bill checks",
    short="hourly rollups",
    key="hourly_rollups",
    before_key="hourly_rollups_before",
    days_setting="COST_HOURLY_HISTORY_DAYS",
    count=lambda before: _count(_hourly(before)),
    prune=lambda before, batch: _prune(_hourly(before), batch),
)
DAILY = History(
    name="daily cost and capacity rollups, ended leaks and idle spells",
    short="daily rollups",
    key="daily_rollups",
    before_key="daily_rollups_before",
    days_setting="COST_HISTORY_DAYS",
    count=lambda before: _count(_daily(before)),
    prune=lambda before, batch: _prune(_daily(before), batch),
)
