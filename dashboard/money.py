"""Money over time as the dashboard shows it (reads only): month to date and the forecast,
what leaks cost this month, and the charts of the overview and of a cluster page, built on
billing.selectors from locations and leaks the caller already narrowed to what the user
may see. A fixed number of queries, however long the history: past days are read from
their day rows. A page's money is read in one snapshot of the database (one_snapshot).

Every figure is in one currency: a chart per currency, never two added together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Q, QuerySet

from billing.costs import ZERO
from billing.models import Leak
from billing.rollups import DAY, day_of, month_of, next_month
from billing.selectors import (
    CAPACITY_FIGURES,
    LEAK_COST_FIELDS,
    CostPoint,
    LeakTotal,
    MonthFigures,
    SeriesStep,
    capacity_series,
    cost_series,
    costliest_clusters,
    forecast_from,
    leak_totals,
    month_figures,
    one_snapshot,
)
from cloud.models import Location
from clusters.models import Cluster
from dashboard.charts import Chart, LineChart, Series, StackedBarChart

TOP_CLUSTERS = 5  # stacked one by one; the rest of a currency's clusters as one layer
TOP_POOLS = 8  # likewise on a cluster page
CAPACITY_DAYS = 30
HOURLY_BELOW_DAYS = 3  # capacity sampled on fewer days is charted by the hour
HOUR = Decimal(3600)


def _days(start: datetime, end: datetime) -> list[datetime]:
    days, day = [], start
    while day < end:
        days.append(day)
        day += DAY
    return days


def _label(day: datetime) -> str:
    return day.strftime("%Y-%m-%d")


def _hour_label(hour: datetime) -> str:
    return hour.strftime("%Y-%m-%d %H:00")


def _slug(text: str) -> str:
    """A chart's key from a name: ASCII letters and digits, the rest dashes (a URL's)."""
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in text.lower()).strip("-")


def forecast_per_day(
    days: list[datetime], *, since: datetime, rate_per_hour: Decimal
) -> list[Decimal]:
    """What the hourly rate adds to each day of `days` from `since` on (forecast_from: the
    hours not sampled yet): the rest of today, then whole days; nothing to days past.
    Summed, it is the rate times the hours left."""
    found = []
    for day in days:
        start, end = max(day, since), day + DAY
        hours = Decimal((end - start).total_seconds()) / HOUR if end > start else ZERO
        found.append(rate_per_hour * hours)
    return found


@dataclass(frozen=True)
class Money:
    """What a page's money section shows."""

    month_start: datetime
    months: list[MonthFigures]  # per account (or the cluster) and currency
    leaks: list[LeakTotal]  # this month's, per currency
    cost_charts: list[Chart]  # per currency: its cost beside its leak and idle cost
    capacity_charts: list[Chart] = field(default_factory=list)

    @property
    def charts(self) -> list[Chart]:
        return [*self.cost_charts, *self.capacity_charts]


PerDay = dict[datetime, Decimal]
Layers = dict[tuple[object, str], PerDay]  # by (id, name)
SHOWN = Decimal("0.005")  # what rounds to a cent or more


def _top(layers: Layers, n: int) -> tuple[list[tuple[str, PerDay]], PerDay]:
    """The `n` largest layers by their sum, largest first, and the rest summed per day."""
    ranked = sorted(layers.items(), key=lambda item: (-sum(item[1].values()), item[0][1]))
    rest: PerDay = defaultdict(lambda: ZERO)
    for _, per_day in ranked[n:]:
        for day, cost in per_day.items():
            rest[day] += cost
    return [(name, per_day) for (_, name), per_day in ranked[:n]], rest


def _cost_stack(
    *,
    key: str,
    title: str,
    currency: str,
    days: list[datetime],
    layers: list[tuple[str, PerDay]],
    extra: list[tuple[str, str, PerDay]],
    forecast: list[Decimal],
) -> StackedBarChart:
    """Cost per day stacked: `layers` in their order, then `extra` layers (name, css, per
    day) that cost something, then the forecast."""
    series = [Series(name, [per_day.get(day, ZERO) for day in days]) for name, per_day in layers]
    for name, css, per_day in extra:
        # A layer of less than a cent a day is rounding, not money (the rest of a sum
        # once its parts are taken out of it).
        values = [per_day.get(day, ZERO) for day in days]
        if any(value >= SHOWN for value in values):
            series.append(Series(name, [max(v, ZERO) for v in values], css=css))
    series.append(Series("forecast", forecast, css="forecast"))
    return StackedBarChart(
        key=key,
        title=title,
        unit=f"{currency} per day",
        unit_short=currency,
        x_title="day",
        x_labels=[_label(day) for day in days],
        series=series,
        note="Past days as the hourly rollups sampled them (an hour no pass sampled counts "
        "nothing); the forecast is the planned rate (the rate now, with each pool at its "
        "replicas) for the hours left in the month.",
    )


def _leak_cost_per_day(
    leaks: QuerySet[Leak], days: list[datetime], now: datetime
) -> dict[str, dict[datetime, Decimal]]:
    """Per currency and day: what leaks cost in it, from the ledger (one query)."""
    start, end = days[0], now
    overlapping = (
        leaks.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start), leaked_since__lt=end)
        .select_related("location")
        .only(*LEAK_COST_FIELDS)
    )
    found: dict[str, dict[datetime, Decimal]] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for leak in overlapping:
        first = max(day_of(leak.leaked_since), start)  # the days it was open in
        last = min(leak.counted_until(), now)
        for day in days[(first - start).days :]:
            if day >= last:
                break
            cost = leak.cost(since=day, until=min(day + DAY, now))
            if cost:
                found[leak.currency][day] += cost
    return found


def _waste_chart(
    key: str,
    title: str,
    currency: str,
    days: list[datetime],
    series: list[tuple[str, str, dict[datetime, Decimal]]],
    note: str,
) -> LineChart:
    return LineChart(
        key=key,
        title=title,
        unit=f"{currency} per day",
        x_title="day",
        x_labels=[_label(day) for day in days],
        series=[
            Series(name, [per_day.get(day, ZERO) for day in days], css=css)
            for name, css, per_day in series
        ],
        filled=True,
        note=note,
    )


def _past_days(now: datetime) -> list[datetime]:
    """The month's days up to today."""
    return _days(month_of(now), day_of(now) + DAY)


def _capacity_charts(locations: QuerySet[Location], now: datetime) -> list[Chart]:
    """Per GPU type (summed over the locations): each figure's daily mean, the last
    CAPACITY_DAYS days; by the hour when fewer than HOURLY_BELOW_DAYS days were sampled
    (a day's mean would be a lone dot, two a ramp between means)."""
    start = day_of(now) - timedelta(days=CAPACITY_DAYS - 1)
    points = capacity_series(
        locations=locations, start=start, end=now, step="day", per_location=False
    )
    sampled = sorted({point.start for point in points})
    step: SeriesStep = "day"
    label: Callable[[datetime], str] = _label
    if 0 < len(sampled) < HOURLY_BELOW_DAYS:
        # Hours are kept for days after they are summed; none left: the days still show.
        hourly = capacity_series(
            locations=locations, start=sampled[0], end=now, step="hour", per_location=False
        )
        if hourly:
            points, step, label = hourly, "hour", _hour_label
    sums: dict[str, dict[datetime, list[Decimal]]] = defaultdict(dict)
    for point in points:
        sums[point.gpu_type][point.start] = [getattr(point, name) for name in CAPACITY_FIGURES]
    charts: list[Chart] = []
    keys: set[str] = set()
    for gpu_type, per_period in sorted(sums.items()):
        shown = sorted(per_period)  # periods no pass sampled are left out
        key = f"capacity-{_slug(gpu_type)}"
        if key in keys:  # two types that differ only in what a key cannot hold
            key = f"{key}-{len(charts)}"
        keys.add(key)
        charts.append(
            LineChart(
                key=key,
                title=f"{gpu_type} capacity",
                unit=f"GPUs (the {step}'s mean)",
                x_title=step,
                x_labels=[label(period) for period in shown],
                series=[
                    Series(name, [per_period[period][i] for period in shown])
                    for i, name in enumerate(CAPACITY_FIGURES)
                ],
                note="Free as whitesky listed it; reserved: billed on no VM; attached in "
                f"whitesky; allocatable and requested as Kubernetes said. {step.title()}s no "
                "pass sampled are left out.",
            )
        )
    return charts


@one_snapshot()
def overview_money(*, locations: QuerySet[Location], leaks: QuerySet[Leak], now: datetime) -> Money:
    """The overview's money: month to date and forecast per account and currency, this
    month's leaks, GPU capacity per type, cost per day stacked by cluster with the
    forecast, and leak and idle cost per day, one chart per currency."""
    start, since = month_of(now), forecast_from(now)
    months = month_figures(group_by="account", locations=locations, now=now)
    # The month's costliest clusters per currency are read day by day; the others are
    # what the accounts' pools cost beside them (one series per account, not per cluster).
    top = costliest_clusters(locations=locations, start=start, end=now, n=TOP_CLUSTERS)
    shown = [cluster for ids in top.values() for cluster in ids]
    by_cluster = cost_series(
        group_by="cluster", locations=locations, start=start, end=now, step="day", clusters=shown
    )
    names = _cluster_names(by_cluster)
    by_account = cost_series(
        group_by="account", locations=locations, start=start, end=now, step="day"
    )
    layers: dict[str, dict[int | None, PerDay]] = defaultdict(lambda: defaultdict(dict))
    others: dict[str, PerDay] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for point in by_cluster:
        assert point.start is not None
        if point.cluster in top[point.currency]:
            layers[point.currency][point.cluster][point.start] = point.total
            others[point.currency][point.start] -= point.total
    orphans: dict[str, PerDay] = defaultdict(lambda: defaultdict(lambda: ZERO))
    idle: dict[str, PerDay] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for point in by_account:
        assert point.start is not None
        orphan = (point.orphan_vgpu or ZERO) + (point.orphan_vm or ZERO)
        orphans[point.currency][point.start] += orphan
        others[point.currency][point.start] += point.total - orphan
        idle[point.currency][point.start] += point.idle
    planned: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for figure in months:
        planned[figure.point.currency] += figure.rate_planned
    month_days = _days(start, next_month(now))
    past = _past_days(now)
    leak_days = _leak_cost_per_day(leaks, past, now)
    currencies = sorted(set(planned) | set(top) | set(orphans) | set(leak_days))
    charts: list[Chart] = []
    for currency in currencies:  # each currency's cost beside its leak and idle cost
        charts.append(
            _cost_stack(
                key=f"cost-{_slug(currency)}",
                title="Cost by cluster",
                currency=currency,
                days=month_days,
                layers=[(names[cluster], layers[currency][cluster]) for cluster in top[currency]],
                extra=[
                    ("other clusters", "others", others[currency]),
                    ("orphans", "orphans", orphans[currency]),
                ],
                forecast=forecast_per_day(
                    month_days, since=since, rate_per_hour=planned.get(currency, ZERO)
                ),
            )
        )
        charts.append(
            _waste_chart(
                f"waste-{_slug(currency)}",
                "Leak and idle cost",
                currency,
                past,
                [
                    ("leaks", "leaks", leak_days.get(currency, {})),
                    ("idle GPUs", "idle", idle.get(currency, {})),
                ],
                "Leaks: the ledger's vGPUs and VMs no machine owns, from flagged to ended. "
                "Idle GPUs: attached vGPUs no pod requests, as the hourly rollups sampled them.",
            )
        )
    return Money(
        month_start=start,
        months=months,
        leaks=leak_totals(leaks=leaks, since=start, until=now),
        cost_charts=charts,
        capacity_charts=_capacity_charts(locations, now),
    )


def _cluster_names(points: Iterable[CostPoint]) -> dict[int | None, str]:
    """Each cluster's name, with its account's where two clusters seen share a name."""
    seen: dict[int | None, CostPoint] = {}
    for point in points:
        seen.setdefault(point.cluster, point)
    counts: dict[str, int] = defaultdict(int)
    for point in seen.values():
        counts[point.cluster_name or ""] += 1
    return {
        cluster: (
            f"{point.cluster_name} ({point.account_name})"
            if counts[point.cluster_name or ""] > 1
            else point.cluster_name or "?"
        )
        for cluster, point in seen.items()
    }


@one_snapshot()
def cluster_money(*, cluster: Cluster, locations: QuerySet[Location], now: datetime) -> Money:
    """A cluster page's money: its month to date and forecast per currency, its cost per
    day this month stacked by pool with the forecast, and its idle GPUs' cost per day."""
    start, since = month_of(now), forecast_from(now)
    months = month_figures(group_by="cluster", locations=locations, now=now, clusters=[cluster.pk])
    by_pool = cost_series(
        group_by="pool",
        locations=locations,
        start=start,
        end=now,
        step="day",
        clusters=[cluster.pk],
    )
    pools: dict[str, Layers] = defaultdict(dict)
    idle: dict[str, PerDay] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for point in by_pool:
        assert point.start is not None
        name = f"{point.pool_name} ({point.location_name})"
        layer = pools[point.currency].setdefault((point.pool, name), {})
        layer[point.start] = layer.get(point.start, ZERO) + point.total
        idle[point.currency][point.start] += point.idle
    planned: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for figure in months:
        planned[figure.point.currency] += figure.rate_planned
    month_days = _days(start, next_month(now))
    past = _past_days(now)
    charts: list[Chart] = []
    currencies = sorted(set(planned) | set(pools))
    for currency in currencies:  # each currency's cost beside its idle cost
        shown, rest = _top(pools.get(currency, {}), TOP_POOLS)
        charts.append(
            _cost_stack(
                key=f"cost-{_slug(currency)}",
                title="Cost by pool",
                currency=currency,
                days=month_days,
                layers=shown,
                extra=[("other pools", "others", rest)],
                forecast=forecast_per_day(
                    month_days, since=since, rate_per_hour=planned.get(currency, ZERO)
                ),
            )
        )
        charts.append(
            _waste_chart(
                f"idle-{_slug(currency)}",
                "Idle GPU cost",
                currency,
                past,
                [("idle GPUs", "idle", idle.get(currency, {}))],
                "Attached vGPUs no pod requests, as the hourly rollups sampled them.",
            )
        )
    return Money(month_start=start, months=months, leaks=[], cost_charts=charts)
