"""The hourly and daily rollups: what things cost and what GPU capacity there was.

Once an hour, the first pass that finds the hour not taken samples the current rates
(`billing.costs`: per pool, per namespace's share, and per location, its pools summed; what
orphans cost is the leak ledger's, billing.leaks), the same shares per set of pod labels
(LabelCostRollup, from the one read of the pods the namespace rows come from) and the
capacity board
(`clusters.capacity`) of every location and writes them as that hour's rows, with the hour's
`Rollup` marker, in one transaction: a pass that finds the marker writes nothing. An hour in
which no pass ran (every worker down) has no rows: it is a gap, counted as such (`samples`),
never made up.

Each day before today whose hours were sampled is summed into day rows, once (its own
marker), and its month's rows are summed again from the month's day rows in the same
transaction: a month to date reads a row per group and month, not one per day. Hourly rows
are kept `COST_HOURLY_HISTORY_DAYS`, day and month rows `COST_HISTORY_DAYS`
(billing.history).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Max, QuerySet, Sum

from billing.costs import ZERO, costs_by, gpu_node_costs, pod_requester_parts
from billing.models import CapacityRollup, CostRollup, LabelCostRollup, Rollup, Step
from cloud.models import Location
from clusters.capacity import capacity_board
from gpus.models import GpuProfile, VgpuReservation
from kube.models import KubeNode
from kube.selectors import kube_gpus_by_location_and_type

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
# The columns a day row sums; the rest of a row is its key.
COST_SUMS = ("machines", "compute", "vgpu", "idle", "idle_gpus")
COST_KEYS = (
    "kind", "account_id", "location_id", "currency",
    "cluster_id", "cluster_name", "pool_id", "pool_name", "namespace",
)  # fmt: skip
LABEL_SUMS = ("gpus", "vgpu")
LABEL_KEYS = ("account_id", "location_id", "currency", "cluster_id", "labels")
CAPACITY_SUMS = ("free", "reserved", "attached", "allocatable", "requested")
CAPACITY_KEYS = ("location_id", "gpu_type")


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def month_of(moment: datetime) -> datetime:
    return day_of(moment).replace(day=1)


def next_month(moment: datetime) -> datetime:
    return (month_of(moment) + timedelta(days=32)).replace(day=1)


@dataclass(frozen=True)
class RollupsTaken:
    hour: datetime | None  # the hour sampled by this pass; None: already taken
    cost_rows: int
    capacity_rows: int
    days: list[datetime]  # the days summed by this pass


def rollups_take(*, now: datetime) -> RollupsTaken:
    """Sample this hour if no pass has, and sum every finished day not summed yet."""
    hour = hour_of(now)
    taken = _hour_take(hour, now)
    days = [_day_take(day, now) for day in _days_to_sum(before=day_of(now))]
    return RollupsTaken(
        hour=hour if taken else None,
        cost_rows=taken[0] if taken else 0,
        capacity_rows=taken[1] if taken else 0,
        days=days,
    )


def _hour_take(hour: datetime, now: datetime) -> tuple[int, int] | None:
    if Rollup.objects.filter(step=Step.HOUR, start=hour).exists():
        return None
    locations = Location.objects.all()
    costs, labels = _cost_rows(hour, locations)
    capacity = _capacity_rows(hour, locations)
    try:
        with transaction.atomic():
            # The marker first: a pass racing this one fails here and writes nothing.
            Rollup.objects.create(step=Step.HOUR, start=hour, taken_at=now)
            CostRollup.objects.bulk_create(costs, batch_size=2000)
            LabelCostRollup.objects.bulk_create(labels, batch_size=2000)
            CapacityRollup.objects.bulk_create(capacity, batch_size=2000)
    except IntegrityError:
        return None
    return len(costs), len(capacity)


def _cost_rows(
    hour: datetime, locations: QuerySet[Location]
) -> tuple[list[CostRollup], list[LabelCostRollup]]:
    at = {"step": Step.HOUR, "start": hour}
    rows = []
    for row in costs_by("pool", locations):
        assert row.location is not None
        rows.append(
            CostRollup(
                **at,
                kind=CostRollup.Kind.POOL,
                account_id=row.account,
                location_id=row.location,
                currency=row.currency,
                cluster_id=row.cluster,
                cluster_name=row.cluster_name or "",
                pool_id=row.pool,
                pool_name=row.pool_name or "",
                machines=row.machines,
                compute=row.compute or ZERO,
                vgpu=row.vgpu,
                idle=row.idle,
                idle_gpus=row.idle_gpus,
            )
        )
    cluster_names = {row.cluster_id: row.cluster_name for row in rows}
    shares: dict[tuple[int, int, int, str, str | None], list[Decimal]] = defaultdict(
        lambda: [ZERO, ZERO, ZERO]
    )
    # Per label set: its share and the GPUs it requests, from the same read of the pods.
    by_labels: dict[tuple[int, int, int, str, str], list[Any]] = defaultdict(lambda: [ZERO, 0])
    for node in gpu_node_costs(locations, pod_labels=True):
        base = (node.account_id, node.location_id, node.cluster_id, node.currency)
        for requester, cost in node.shares.items():
            assert requester is not None
            of_namespace, labels = pod_requester_parts(requester)
            shares[(*base, of_namespace)][0] += cost
            held = by_labels[(*base, json.dumps(labels, sort_keys=True))]
            held[0] += cost
            held[1] += node.requests[requester]
        if node.idle_gpus:
            rest = shares[(*base, None)]
            rest[0] += node.idle
            rest[1] += node.idle
            rest[2] += node.idle_gpus
    ordered = sorted(shares.items(), key=lambda item: (item[0][:4], item[0][4] or "\uffff"))
    for (account_id, location_id, cluster_id, currency, namespace), figures in ordered:
        vgpu, idle, gpus = figures
        rows.append(
            CostRollup(
                **at,
                kind=CostRollup.Kind.NAMESPACE,
                account_id=account_id,
                location_id=location_id,
                currency=currency,
                cluster_id=cluster_id,
                cluster_name=cluster_names.get(cluster_id, ""),
                namespace=namespace,
                vgpu=vgpu,
                idle=idle,
                idle_gpus=int(gpus),
            )
        )
    # Each location's pools summed: an account's or a location's figures read from a row
    # per location, not from every pool. Its orphans are the leak ledger's (billing.leaks).
    totals: dict[tuple[int, int, str], CostRollup] = {}
    for location_id, account_id, currency in locations.order_by("pk").values_list(
        "pk", "account_id", "currency"
    ):
        totals[account_id, location_id, currency] = CostRollup(
            **at,
            kind=CostRollup.Kind.LOCATION,
            account_id=account_id,
            location_id=location_id,
            currency=currency,
        )
    for pool in [row for row in rows if row.kind == CostRollup.Kind.POOL]:
        total = totals[pool.account_id, pool.location_id, pool.currency]
        for name in ("machines", "compute", "vgpu", "idle", "idle_gpus"):
            setattr(total, name, getattr(total, name) + getattr(pool, name))
    rows.extend(totals.values())
    labelled = [
        LabelCostRollup(
            **at,
            account_id=account_id,
            location_id=location_id,
            cluster_id=cluster_id,
            currency=currency,
            labels=json.loads(labels),  # keys sorted: a day sums a set as one
            vgpu=vgpu,
            gpus=gpus,
        )
        for (account_id, location_id, cluster_id, currency, labels), (vgpu, gpus) in sorted(
            by_labels.items()
        )
    ]
    return rows, labelled


def _capacity_rows(hour: datetime, locations: QuerySet[Location]) -> list[CapacityRollup]:
    nodes = KubeNode.objects.filter(machine__pool__site__location__in=locations)
    board = capacity_board(
        cards=GpuProfile.objects.filter(location__in=locations),
        reservations=VgpuReservation.objects.filter(location__in=locations),
        kube=kube_gpus_by_location_and_type(nodes),
        locations=list(locations),
    )
    return [
        CapacityRollup(
            step=Step.HOUR,
            start=hour,
            location_id=row.location.pk,
            gpu_type=row.gpu_type or "(no type label)",
            free=row.free,
            reserved=row.reserved,
            attached=row.attached,
            allocatable=row.kube_allocatable,
            requested=row.kube_requested,
        )
        for row in board
    ]


def _days_to_sum(*, before: datetime) -> list[datetime]:
    """The days before `before` with sampled hours and no day rollup, oldest first."""
    # Days are summed oldest first: every day up to the newest summed one is done.
    newest = Rollup.objects.filter(step=Step.DAY).aggregate(newest=Max("start"))["newest"]
    hours = Rollup.objects.filter(step=Step.HOUR, start__lt=before).values_list("start", flat=True)
    if newest is not None:
        hours = hours.filter(start__gte=newest + DAY)
    return sorted({day_of(h) for h in hours})


def _day_take(day: datetime, now: datetime) -> datetime:
    hours = {"step": Step.HOUR, "start__gte": day, "start__lt": day + DAY}
    samples = Rollup.objects.filter(**hours).count()
    costs = [
        CostRollup(step=Step.DAY, start=day, **row)
        for row in CostRollup.objects.filter(**hours)
        .order_by()
        .values(*COST_KEYS)
        .annotate(samples=Count("pk"), **{name: Sum(name) for name in COST_SUMS})
    ]
    labels = [
        LabelCostRollup(step=Step.DAY, start=day, **row)
        for row in LabelCostRollup.objects.filter(**hours)
        .order_by()
        .values(*LABEL_KEYS)
        .annotate(**{name: Sum(name) for name in LABEL_SUMS})
    ]
    capacity = [
        CapacityRollup(step=Step.DAY, start=day, **row)
        for row in CapacityRollup.objects.filter(**hours)
        .order_by()
        .values(*CAPACITY_KEYS)
        .annotate(samples=Count("pk"), **{name: Sum(name) for name in CAPACITY_SUMS})
    ]
    # A type seen in only some hours is still a mean over the day's samples.
    for row in capacity:
        row.samples = samples
    try:
        with transaction.atomic():
            Rollup.objects.create(step=Step.DAY, start=day, taken_at=now, samples=samples)
            CostRollup.objects.bulk_create(costs, batch_size=2000)
            LabelCostRollup.objects.bulk_create(labels, batch_size=2000)
            CapacityRollup.objects.bulk_create(capacity, batch_size=2000)
            month_sum(month_of(day))
    except IntegrityError:
        pass  # another pass summed it
    return day


def month_sum(month: datetime) -> None:
    """The month's rows, again, from its day rows: each group's figures and samples
    summed (a capacity row's samples: the hours its day markers say were summed)."""
    days = {"step": Step.DAY, "start__gte": month, "start__lt": next_month(month)}
    CostRollup.objects.filter(step=Step.MONTH, start=month).delete()
    LabelCostRollup.objects.filter(step=Step.MONTH, start=month).delete()
    CapacityRollup.objects.filter(step=Step.MONTH, start=month).delete()
    CostRollup.objects.bulk_create(
        [
            CostRollup(step=Step.MONTH, start=month, **row)
            for row in CostRollup.objects.filter(**days)
            .order_by()
            .values(*COST_KEYS)
            .annotate(samples=Sum("samples"), **{name: Sum(name) for name in COST_SUMS})
        ],
        batch_size=2000,
    )
    LabelCostRollup.objects.bulk_create(
        [
            LabelCostRollup(step=Step.MONTH, start=month, **row)
            for row in LabelCostRollup.objects.filter(**days)
            .order_by()
            .values(*LABEL_KEYS)
            .annotate(**{name: Sum(name) for name in LABEL_SUMS})
        ],
        batch_size=2000,
    )
    samples = Rollup.objects.filter(**days).aggregate(n=Sum("samples"))["n"] or 0
    capacity = [
        CapacityRollup(step=Step.MONTH, start=month, **row)
        for row in CapacityRollup.objects.filter(**days)
        .order_by()
        .values(*CAPACITY_KEYS)
        .annotate(**{name: Sum(name) for name in CAPACITY_SUMS})
    ]
    for row in capacity:
        row.samples = samples
    CapacityRollup.objects.bulk_create(capacity, batch_size=2000)
