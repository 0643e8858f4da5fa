"""The money history (billing.rollups, billing.selectors, billing.history): hourly samples
taken once, days summed once, series, month to date and the forecast, against figures
computed by hand on the world of tests/billing/test_costs.py (an hour of nl-ams: pool gpu
0.36 compute + 4 vGPU, pool cpu 0.04, orphans 1 + 0.03 EUR; ch-zrh: pool remote 0.16 + 2
CHF)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.models import F, Max, Sum
from django.test.utils import CaptureQueriesContext, override_settings

from billing.models import CapacityRollup, CostRollup, Rollup, Step
from billing.rollups import rollups_take
from billing.selectors import (
    _covering,
    capacity_series,
    cost_series,
    costliest_clusters,
    hours_sampled,
    month_figures,
)
from capvco_web.retention import history_prune
from cloud.models import Location
from clusters.models import Machine
from gpus.models import VgpuReservation
from tests.billing.support import world_leaks
from tests.billing.test_costs import World, world_make
from tests.factories import GpuProfileFactory

pytestmark = pytest.mark.django_db

D = Decimal
T0 = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)  # a Tuesday, 10:05 UTC


@pytest.fixture
def world() -> World:
    return world_make()


def _writes(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"] for q in queries.captured_queries
        if q["sql"].split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE")
    ]  # fmt: skip


def test_an_hour_is_sampled_once_and_a_second_pass_writes_nothing(world: World) -> None:
    taken = rollups_take(now=T0)
    with CaptureQueriesContext(connection) as queries:
        again = rollups_take(now=T0 + timedelta(minutes=40))

    assert taken.hour == T0.replace(minute=0) and again.hour is None
    assert _writes(queries) == []
    pools = {
        row.pool_name: (row.currency, row.machines, row.compute, row.vgpu, row.idle)
        for row in CostRollup.objects.filter(kind=CostRollup.Kind.POOL)
    }
    assert pools == {
        "gpu": ("EUR", 2, D("0.36"), D("4"), D("1")),
        "cpu": ("EUR", 2, D("0.04"), D("0"), D("0")),
        "remote": ("CHF", 1, D("0.16"), D("2"), D("2")),
    }
    # Each location: its pools summed (its orphans are the leak ledger's).
    locations = {
        row.location.name: (row.machines, row.compute, row.vgpu)
        for row in CostRollup.objects.filter(kind=CostRollup.Kind.LOCATION)
    }
    assert locations == {"nl-ams": (4, D("0.40"), D("4")), "ch-zrh": (1, D("0.16"), D("2"))}
    # Namespaces: node-0 (2 vGPUs at 1/h): train 1, idle 1; node-1: infer 1; node-4 (CHF):
    # idle 2.
    shares = sorted(
        (row.currency, row.namespace or "-", row.vgpu, row.idle)
        for row in CostRollup.objects.filter(kind=CostRollup.Kind.NAMESPACE)
    )
    assert shares == [
        ("CHF", "-", D("2"), D("2")),
        ("EUR", "-", D("1"), D("1")),
        ("EUR", "infer", D("1"), D("0")),
        ("EUR", "train", D("1"), D("0")),
    ]


def test_a_day_is_summed_once_its_hours_are_over_and_reads_the_same(world: World) -> None:
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(hours=1))
    # A third hour with one more attached vGPU on m0 (1/h more in the gpu pool).
    VgpuReservation.objects.create(
        location=world.ams, name="capvco-prod-m0-gpu-9", vgpu_id="v-extra",
        state=VgpuReservation.State.ATTACHED, machine=world.machines["m0"], vm_id=100,
    )  # fmt: skip
    rollups_take(now=T0 + timedelta(hours=2))
    day = T0.replace(hour=0, minute=0)
    series = {"group_by": "cluster", "locations": Location.objects.all(), "step": "day"}
    before = cost_series(**series, start=day, end=day + timedelta(days=1))  # type: ignore[arg-type]

    summed = rollups_take(now=T0 + timedelta(days=1))
    after = cost_series(**series, start=day, end=day + timedelta(days=1))  # type: ignore[arg-type]

    assert summed.days == [day]
    assert rollups_take(now=T0 + timedelta(days=1, minutes=30)).days == []
    eur = CostRollup.objects.get(step=Step.DAY, kind="pool", pool_name="gpu")
    # 3 hours of 4.36 EUR, and the third hour's extra vGPU: 14.08.
    assert (eur.samples, eur.compute + eur.vgpu, eur.machines) == (3, D("14.08"), 6)
    # The day reads the same from its hours and from its day rows.
    figures = [(p.start, p.cluster_name, p.currency, p.total) for p in after]
    assert figures == [(p.start, p.cluster_name, p.currency, p.total) for p in before]
    assert figures == [
        (day, "prod", "CHF", D("6.48")),  # 3 * 2.16
        (day, "prod", "EUR", D("14.20")),  # 3 * 4.40 + 1
    ]
    hourly = cost_series(**series | {"step": "hour"}, start=day, end=day + timedelta(days=1))  # type: ignore[arg-type]
    assert [p.total for p in hourly if p.currency == "EUR"] == [D("4.40"), D("4.40"), D("5.40")]


def test_a_month_reads_the_same_from_its_month_rows_as_from_its_days(world: World) -> None:
    month = T0.replace(hour=0, minute=0)
    for days in (0, 1, 2):  # an hour on each of three days; the third is today
        rollups_take(now=T0 + timedelta(days=days))
    VgpuReservation.objects.create(
        location=world.ams, name="capvco-prod-m0-gpu-9", vgpu_id="v-extra",
        state=VgpuReservation.State.ATTACHED, machine=world.machines["m0"], vm_id=100,
    )  # fmt: skip
    rollups_take(now=T0 + timedelta(days=2, hours=1))  # today's second hour costs 1 more
    now = T0 + timedelta(days=2, hours=1, minutes=30)
    series = {"group_by": "cluster", "locations": Location.objects.all(), "start": month}

    with CaptureQueriesContext(connection) as queries:
        whole = cost_series(**series, end=now, step="month")  # type: ignore[arg-type]
    by_day = cost_series(**series, end=now, step="day")  # type: ignore[arg-type]

    # The two days summed are one month row per pool; today is read from its hours.
    gpu = CostRollup.objects.get(step=Step.MONTH, kind="pool", pool_name="gpu")
    assert (gpu.start, gpu.samples, gpu.compute + gpu.vgpu) == (month, 2, D("8.72"))
    assert any("'month'" in q["sql"] for q in queries.captured_queries)
    summed: dict[str, Decimal] = {}
    for point in by_day:
        summed[point.currency] = summed.get(point.currency, D(0)) + point.total
    assert [(p.start, p.currency, p.total) for p in whole] == [
        (month, "CHF", summed["CHF"]),
        (month, "EUR", summed["EUR"]),
    ]
    assert summed["EUR"] == 4 * D("4.40") + 1  # four hours of the pools, the extra vGPU once

    rollups_take(now=T0 + timedelta(days=3))  # today is summed: the month row again
    assert CostRollup.objects.filter(step=Step.MONTH, pool_name="gpu").count() == 1
    gpu = CostRollup.objects.get(step=Step.MONTH, kind="pool", pool_name="gpu")
    assert (gpu.samples, gpu.compute + gpu.vgpu) == (4, D("18.44"))
    # To the end of the day summed (not the hour just sampled): the same as before.
    again = cost_series(**series, end=month + timedelta(days=3), step="month")  # type: ignore[arg-type]
    assert [p.total for p in again] == [p.total for p in whole]


@pytest.mark.parametrize(
    ("start", "end", "eur"),
    [
        # November is its month row; October from the 26th and December's 1st, their days
        # (the 25th is not read).
        ("2026-10-26", "2026-12-02", ["8.80", "4.40"]),
        # October is its month row; November to the 15th, its days (the 20th is not read).
        ("2026-10-01", "2026-11-15", ["4.40", "4.40"]),
    ],
)
def test_a_range_reads_the_months_it_holds_whole_from_their_rows_and_the_rest_by_day(
    world: World, start: str, end: str, eur: list[str]
) -> None:
    # An hour sampled on the 25th of October, the 10th and 20th of November and the 1st
    # and 2nd of December; each day summed by the next pass, each month again with it.
    for day in ("2026-10-25", "2026-11-10", "2026-11-20", "2026-12-01", "2026-12-02"):
        rollups_take(now=datetime.fromisoformat(f"{day}T10:05+00:00"))
    bounds = {"start": datetime.fromisoformat(f"{start}T00:00+00:00"),
              "end": datetime.fromisoformat(f"{end}T00:00+00:00")}  # fmt: skip
    series = {"group_by": "cluster", "locations": Location.objects.all(), **bounds}

    with CaptureQueriesContext(connection) as queries:
        by_month = cost_series(**series, step="month")  # type: ignore[arg-type]
        top = costliest_clusters(locations=Location.objects.all(), n=5, **bounds)
    by_day = cost_series(**series, step="day")  # type: ignore[arg-type]

    # The months held whole and the days beside them, in one query each.
    assert sum("'month'" in q["sql"] and "'day'" in q["sql"] for q in queries.captured_queries) == 2
    summed: dict[tuple[datetime, str], Decimal] = {}
    for point in by_day:
        assert point.start is not None
        key = (point.start.replace(day=1), point.currency)
        summed[key] = summed.get(key, D(0)) + point.total
    assert {(p.start, p.currency): p.total for p in by_month} == summed
    assert [p.total for p in by_month if p.currency == "EUR"] == [D(figure) for figure in eur]
    assert top == {"CHF": [world.cluster.pk], "EUR": [world.cluster.pk]}
    # The rows the ranking reads make up the range once: each hour in one of them.
    assert _covered(**bounds) == sum((p.compute + p.vgpu for p in by_day), D(0))  # type: ignore[operator]


def test_the_costliest_clusters_of_a_range_of_hours_are_read_from_its_hours(
    world: World,
) -> None:
    rollups_take(now=T0)  # 10:00 on the 1st
    rollups_take(now=T0 + timedelta(hours=14))  # the 1st summed; 00:00 on the 2nd sampled
    CostRollup.objects.filter(step=Step.HOUR, start=MONTH + timedelta(days=1)).delete()
    hours = {
        "start": T0.replace(minute=0) - timedelta(hours=1),
        "end": MONTH + timedelta(days=1, hours=1),
    }
    ranked = {"locations": Location.objects.all(), "n": 5, **hours}

    # The 1st from 09:00 is in no day row whole: its hours, as a chart by the hour reads.
    assert costliest_clusters(**ranked) == {  # type: ignore[arg-type]
        "CHF": [world.cluster.pk], "EUR": [world.cluster.pk],
    }  # fmt: skip
    assert _covered(**hours) == D("4.40") + D("2.16")  # its 10:00, once


def _covered(start: datetime, end: datetime) -> Decimal:
    """What the pools cost in the rows the ranking reads for [start, end)."""
    rows = CostRollup.objects.filter(_covering(start, end), kind="pool")
    return rows.aggregate(n=Sum(F("compute") + F("vgpu")))["n"]  # type: ignore[no-any-return]


MONTH = T0.replace(hour=0, minute=0)
# Read up to the 3rd: the 1st and 2nd sampled, the 1st summed, the 2nd read from its hours.
READ_END = MONTH + timedelta(days=2)
SERIES_READS: dict[str, Callable[[], object]] = {
    "cost by month": lambda: [
        (p.start, p.cluster_name, p.currency, p.total)
        for p in cost_series(
            group_by="cluster",
            locations=Location.objects.all(),
            start=MONTH,
            end=READ_END,
            step="month",
        )
    ],
    "cost by day": lambda: [
        (p.start, p.currency, p.total)
        for p in cost_series(
            group_by="account",
            locations=Location.objects.all(),
            start=MONTH,
            end=READ_END,
            step="day",
        )
    ],
    "capacity by month": lambda: capacity_series(
        locations=Location.objects.all(), start=MONTH, end=READ_END, step="month"
    ),
    "costliest clusters": lambda: costliest_clusters(
        locations=Location.objects.all(), start=MONTH, end=READ_END, n=5
    ),
    "month to date": lambda: [
        (f.point.currency, f.point.total, f.hours_sampled, f.hours_left, f.forecast)
        for f in month_figures(group_by="account", locations=Location.objects.all(), now=READ_END)
    ],
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("read", SERIES_READS.values(), ids=SERIES_READS.keys())
def test_a_day_summed_in_another_connection_while_a_series_is_read_counts_once(
    world: World, read: Callable[[], object]
) -> None:
    """The next pass sums the 2nd (its day rows, the month's rows again, its marker) in a
    connection of its own, committed after the read's first query: read as of that query,
    the 2nd is read from its hours and not from the month's rows too."""
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(days=1))  # the 1st summed: the 2nd's hours are read
    rollups_take(now=T0 + timedelta(days=1, hours=1))
    before = read()  # each of the three hours once: nothing is summed while it is read
    summed: list[datetime] = []
    passes: list[threading.Thread] = []

    def sum_the_2nd() -> None:
        try:
            summed.extend(rollups_take(now=READ_END).days)
        finally:
            connection.close()

    def after_the_first_query(execute: Any, *args: Any) -> Any:
        answer = execute(*args)
        if not passes:  # the read has begun: the day is summed and committed before it goes on
            passes.append(threading.Thread(target=sum_the_2nd))
            passes[0].start()
            passes[0].join(30)
        return answer

    with connection.execute_wrapper(after_the_first_query):
        during = read()

    month_rows = CostRollup.objects.filter(step=Step.MONTH, start=MONTH)
    assert summed == [MONTH + timedelta(days=1)]
    assert month_rows.aggregate(n=Max("samples"))["n"] == 3  # they hold the 2nd now
    assert during == before  # read as it was when the read began: each hour once
    # The read's transaction is over: the connection writes again.
    assert rollups_take(now=READ_END + timedelta(hours=1)).hour == READ_END + timedelta(hours=1)


def test_a_month_read_counts_each_hour_once(world: World) -> None:
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(days=1))
    rollups_take(now=T0 + timedelta(days=1, hours=1))

    before = SERIES_READS["cost by month"]()
    rollups_take(now=READ_END)  # the 2nd summed: read from the month's rows
    after = SERIES_READS["cost by month"]()

    # Three hours: the gpu and cpu pools 4.40 EUR an hour, the remote one 2.16 CHF.
    assert [(name, currency, total) for _, name, currency, total in before] == [
        ("prod", "CHF", 3 * D("2.16")),
        ("prod", "EUR", 3 * D("4.40")),
    ]
    assert after == before


@override_settings(COST_HOURLY_HISTORY_DAYS=60)
def test_day_markers_summed_before_they_counted_hours_get_their_count(world: World) -> None:
    from importlib import import_module

    from django.apps import apps

    old = T0 - timedelta(days=90)
    for hours in (0, 1, 2):
        rollups_take(now=old + timedelta(hours=hours))
    rollups_take(now=T0)
    history_prune(now=T0)  # the hours are gone: the day's rows say how many there were
    Rollup.objects.filter(step=Step.DAY).update(samples=1)

    import_module("billing.migrations.0007_rollup_samples").days_count(apps, None)

    assert list(Rollup.objects.filter(step=Step.DAY).values_list("samples", flat=True)) == [3]


def test_an_hour_no_pass_sampled_is_a_gap_not_an_estimate(world: World) -> None:
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(hours=3))  # the workers were down for two hours
    day = T0.replace(hour=0, minute=0)
    world_leaks(world, T0.replace(minute=0), T0.replace(minute=0) + timedelta(hours=1))

    points = cost_series(
        group_by="account", locations=Location.objects.all(), start=day,
        end=day + timedelta(days=1), step="day",
    )  # fmt: skip

    assert hours_sampled(day, day + timedelta(days=1)) == 2
    # EUR: 2 hours of 4.40 + the ledger's orphans, an hour of 1.03: the ledger knows no gap.
    assert [(p.currency, p.total) for p in points] == [("CHF", D("4.32")), ("EUR", D("9.83"))]


def test_month_to_date_and_the_forecast_take_the_pools_replicas(world: World) -> None:
    rollups_take(now=T0 - timedelta(hours=1))
    rollups_take(now=T0)
    # The cpu pool asks for one machine more, of 2 vCPUs and 4 GiB: 0.04/h at list price.
    world.cpu.replicas, world.cpu.vcpus, world.cpu.memory_mib = 3, 2, 4096
    world.cpu.save(update_fields=["replicas", "vcpus", "memory_mib"])
    now = T0 + timedelta(minutes=5)

    months = {
        f.point.currency: f
        for f in month_figures(group_by="cluster", locations=Location.objects.all(), now=now)
    }

    eur = months["EUR"]
    # Spent: 2 sampled hours of 4.40 (09:00 and 10:00, each counted whole). The rate now
    # 4.40, planned 4.44 (one cpu machine more); from 11:00 to the month's end at
    # 2026-12-31 24:00: 733 h left.
    assert (eur.point.total, eur.hours_sampled, eur.rate_now) == (D("8.80"), 2, D("4.40"))
    assert eur.rate_planned == D("4.44")
    left = D(733)
    assert eur.hours_left == left
    assert eur.forecast == (D("8.80") + D("4.44") * left).quantize(D("0.01"))
    assert months["CHF"].forecast == (D("4.32") + D("2.16") * left).quantize(D("0.01"))


def test_a_deleted_clusters_cost_stays_in_the_history(world: World) -> None:
    rollups_take(now=T0)
    for machine in Machine.objects.filter(pool__cluster=world.cluster):
        VgpuReservation.objects.filter(machine=machine).delete()
        machine.delete()
    world.cluster.pools.all().delete()
    world.cluster.sites.all().delete()
    world.cluster.delete()

    points = cost_series(
        group_by="cluster", locations=Location.objects.all(), start=T0.replace(minute=0),
        end=T0 + timedelta(hours=1), step="hour",
    )  # fmt: skip

    assert [(p.cluster_name, p.currency, p.total) for p in points] == [
        ("prod", "CHF", D("2.16")),
        ("prod", "EUR", D("4.40")),
    ]


def test_capacity_is_the_mean_of_the_samples_per_type(world: World) -> None:
    GpuProfileFactory(location=world.ams, profile_id="p1", vendor="NVIDIA",
                      model="A100 0000:01:00.0", available_instances=4)  # fmt: skip
    rollups_take(now=T0)
    GpuProfileFactory(location=world.ams, profile_id="p2", vendor="NVIDIA",
                      model="A100 0000:02:00.0", available_instances=2)  # fmt: skip
    rollups_take(now=T0 + timedelta(hours=1))
    day = T0.replace(hour=0, minute=0)

    points = capacity_series(
        locations=Location.objects.all(), start=day, end=day + timedelta(days=1), step="day"
    )

    a100 = [p for p in points if p.location_name == "nl-ams" and "A100" in p.gpu_type]
    # Free: 4 in the first hour, 4 + 2 in the second: a mean of 5.
    assert [(p.gpu_type, p.free) for p in a100] == [("NVIDIA A100", D("5.00"))]
    assert CapacityRollup.objects.filter(step=Step.HOUR).count() >= 2


@override_settings(COST_HOURLY_HISTORY_DAYS=60, COST_HISTORY_DAYS=400)
def test_hours_are_pruned_only_once_their_day_is_summed(world: World) -> None:
    old = T0 - timedelta(days=90)
    rollups_take(now=old)
    unsummed = CostRollup.objects.filter(step=Step.HOUR).count()

    history_prune(now=T0)  # the old day is not summed yet: its hours stay
    kept = CostRollup.objects.filter(step=Step.HOUR).count()
    rollups_take(now=T0)  # sums the old day
    history_prune(now=T0)
    very_old = CostRollup.objects.filter(step=Step.DAY).count()
    history_prune(now=T0 + timedelta(days=400))

    assert kept == unsummed > 0
    assert not CostRollup.objects.filter(step=Step.HOUR, start__lt=T0 - timedelta(days=60))
    assert very_old > 0
    assert not CostRollup.objects.filter(step=Step.DAY)
    assert not Rollup.objects.filter(step=Step.DAY)
    assert not CostRollup.objects.filter(step=Step.MONTH)


@override_settings(COST_HOURLY_HISTORY_DAYS=60, COST_HISTORY_DAYS=400)
def test_a_days_hours_sampled_and_capacity_mean_outlive_its_hours(world: World) -> None:
    GpuProfileFactory(location=world.ams, profile_id="p1", vendor="NVIDIA",
                      model="A100 0000:01:00.0", available_instances=4)  # fmt: skip
    old = T0 - timedelta(days=90)
    rollups_take(now=old)
    rollups_take(now=old + timedelta(hours=1))
    rollups_take(now=T0)  # sums the old day
    day = old.replace(hour=0, minute=0)
    span = {"start": day, "end": day + timedelta(days=1)}

    def figures() -> tuple[object, ...]:
        capacity = capacity_series(locations=Location.objects.all(), step="day", **span)  # type: ignore[arg-type]
        return (
            hours_sampled(**span),
            [(p.gpu_type, p.free) for p in capacity if "A100" in p.gpu_type],
        )

    before = figures()
    history_prune(now=T0)  # the old day's hours go

    assert not Rollup.objects.filter(step=Step.HOUR, start__lt=T0 - timedelta(days=60))
    assert before == (2, [("NVIDIA A100", D("4.00"))])
    assert figures() == before


@override_settings(COST_HISTORY_DAYS=400)
def test_a_months_rows_stay_while_any_of_its_days_is_kept(world: World) -> None:
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(days=1))  # December's row, from its first day
    kept_until = T0.replace(day=1, hour=0, minute=0) + timedelta(days=31)

    history_prune(now=kept_until + timedelta(days=400 - 1))  # the 1st of January is kept
    assert CostRollup.objects.filter(step=Step.MONTH).exists()
    history_prune(now=kept_until + timedelta(days=400 + 1))  # December is gone
    assert not CostRollup.objects.filter(step=Step.MONTH).exists()
    assert not CapacityRollup.objects.filter(step=Step.MONTH).exists()
