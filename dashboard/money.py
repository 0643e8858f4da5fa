"""Money over time as the dashboard shows it (reads only): month to date and the forecast,
what leaks cost this month, and the charts of the overview, a location's page and a cluster
page over the window the page asks for (billing.windows), built on billing.selectors from
locations and leaks the caller already narrowed to what the user may see. A fixed number of
queries, however long the history and the window: past days are read from their day rows.
A page's money is read in one snapshot of the database (one_snapshot).

Every figure is in one currency: a chart per currency, never two added together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import lru_cache

from django.db.models import QuerySet

from billing.costs import ZERO
from billing.models import Leak
from billing.rollups import month_of
from billing.selectors import (
    CAPACITY_FIGURES,
    CapacityPoint,
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
    step_after,
)
from billing.windows import Window
from cloud.models import Location
from clusters.models import Cluster
from dashboard.charts import Chart, LineChart, Series, StackedBarChart

TOP_CLUSTERS = 5  # stacked one by one; the rest of a currency's clusters as one layer
TOP_POOLS = 8  # likewise on a cluster page
CAPACITY = "capacity-"  # what the key of a capacity chart begins with
COST = "cost-"  # and of a cost by cluster (or by pool)
HOUR = Decimal(3600)


# As strftime's %Y-%m-%d, faster, and each step once: a page's charts label some thousands
# of steps, the same few hundred.
@lru_cache(maxsize=4096)
def _label(day: datetime) -> str:
    return day.date().isoformat()


@lru_cache(maxsize=4096)
def _hour_label(hour: datetime) -> str:
    return f"{hour.date().isoformat()} {hour.hour:02}:00"


def _labels(step: SeriesStep, starts: list[datetime]) -> list[str]:
    label = _hour_label if step == "hour" else _label
    return [label(start) for start in starts]


def _slug(text: str) -> str:
    """A chart's key from a name: ASCII letters and digits, the rest dashes (a URL's)."""
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in text.lower()).strip("-")


def forecast_per_step(
    steps: list[datetime], *, step: SeriesStep, since: datetime, rate_per_hour: Decimal
) -> list[Decimal]:
    """What the hourly rate adds to each step of `steps` from `since` on (forecast_from:
    the hours not sampled yet): the rest of the step now running, then whole steps; nothing
    to steps past. Summed, it is the rate times the hours left in them."""
    found = []
    for start in steps:
        begin, end = max(start, since), step_after(step, start)
        hours = Decimal((end - begin).total_seconds()) / HOUR if end > begin else ZERO
        found.append(rate_per_hour * hours)
    return found


@dataclass(frozen=True)
class Money:
    """What a page's money section shows: its month, and its charts over `window` (none:
    the window asked for was refused, the page says why)."""

    month_start: datetime
    months: list[MonthFigures]  # per account (or the cluster) and currency
    leaks: list[LeakTotal]  # this month's, per currency
    window: Window | None = None
    cost_charts: list[Chart] = field(default_factory=list)  # per currency: with leak, idle
    capacity_charts: list[Chart] = field(default_factory=list)

    @property
    def charts(self) -> list[Chart]:
        return [*self.cost_charts, *self.capacity_charts]


PerStep = dict[datetime, Decimal]
Layers = dict[tuple[object, str], PerStep]  # by (id, name)
SHOWN = Decimal("0.005")  # what rounds to a cent or more


def _top(layers: Layers, n: int) -> tuple[list[tuple[str, PerStep]], PerStep]:
    """The `n` largest layers by their sum, largest first, and the rest summed per step."""
    ranked = sorted(layers.items(), key=lambda item: (-sum(item[1].values()), item[0][1]))
    rest: PerStep = defaultdict(lambda: ZERO)
    for _, per_step in ranked[n:]:
        for start, cost in per_step.items():
            rest[start] += cost
    return [(name, per_step) for (_, name), per_step in ranked[:n]], rest


def _cost_stack(
    *,
    key: str,
    title: str,
    currency: str,
    window: Window,
    layers: list[tuple[str, PerStep]],
    extra: list[tuple[str, str, PerStep]],
    rate_per_hour: Decimal,
    since: datetime,
) -> StackedBarChart:
    """Cost per step stacked: `layers` in their order, then `extra` layers (name, css, per
    step) that cost something, then, where the window reaches the hours not sampled yet
    (`since`), the forecast at the planned rate."""
    steps = window.steps
    series = [Series(name, [layer.get(s, ZERO) for s in steps]) for name, layer in layers]
    for name, css, per_step in extra:
        # A layer of less than a cent a step is rounding, not money (the rest of a sum
        # once its parts are taken out of it).
        values = [per_step.get(s, ZERO) for s in steps]
        if any(value >= SHOWN for value in values):
            series.append(Series(name, [max(v, ZERO) for v in values], css=css))
    if window.end > since:
        forecast = forecast_per_step(
            steps, step=window.step, since=since, rate_per_hour=rate_per_hour
        )
        series.append(Series("forecast", forecast, css="forecast"))
    return StackedBarChart(
        key=key,
        title=title,
        unit=f"{currency} per {window.step}",
        unit_short=currency,
        x_title=window.step,
        x_labels=_labels(window.step, steps),
        series=series,
        note=f"Past {window.step}s as the hourly rollups sampled them (an hour no pass "
        "sampled counts nothing); the forecast is the planned rate (the rate now, with each "
        "pool at its replicas) for the hours not sampled yet.",
    )


def _waste_chart(
    key: str,
    title: str,
    currency: str,
    window: Window,
    now: datetime,
    series: list[tuple[str, str, PerStep]],
    note: str,
) -> LineChart:
    """Per step of the window up to the one now running."""
    past = [start for start in window.steps if start < now]
    return LineChart(
        key=key,
        title=title,
        unit=f"{currency} per {window.step}",
        x_title=window.step,
        x_labels=_labels(window.step, past),
        series=[
            Series(name, [per_step.get(start, ZERO) for start in past], css=css)
            for name, css, per_step in series
        ],
        filled=True,
        note=note,
    )


def _capacity_charts(locations: QuerySet[Location], window: Window, now: datetime) -> list[Chart]:
    """Per GPU type (summed over the locations): each figure's mean per step of the window
    (a new install's first days: one point a day, until the window is asked by the hour)."""
    points = capacity_series(
        locations=locations,
        start=window.start,
        end=min(window.end, now),
        step=window.step,
        per_location=False,
    )
    step = window.step
    # The points come by time, so each type's periods come in order (periods no pass
    # sampled are left out).
    by_type: dict[str, list[CapacityPoint]] = defaultdict(list)
    for point in points:
        by_type[point.gpu_type].append(point)
    periods = {gpu_type: [point.start for point in shown] for gpu_type, shown in by_type.items()}
    # A point ends with its figures, in their order: each figure's column at once.
    first = len(CapacityPoint._fields) - len(CAPACITY_FIGURES)
    figures = {
        gpu_type: [list(column) for column in zip(*(point[first:] for point in shown), strict=True)]
        for gpu_type, shown in by_type.items()
    }
    charts: list[Chart] = []
    keys: set[str] = set()
    for gpu_type, shown in sorted(periods.items()):
        key = f"{CAPACITY}{_slug(gpu_type)}"
        if key in keys:  # two types that differ only in what a key cannot hold
            key = f"{key}-{len(charts)}"
        keys.add(key)
        charts.append(
            LineChart(
                key=key,
                title=f"{gpu_type} capacity",
                unit=f"GPUs (the {step}'s mean)",
                x_title=step,
                x_labels=_labels(step, shown),
                series=[
                    Series(name, values)
                    for name, values in zip(CAPACITY_FIGURES, figures[gpu_type], strict=True)
                ],
                note="Free as whitesky listed it; reserved: billed on no VM; attached in "
                f"whitesky; allocatable and requested as Kubernetes said. {step.title()}s no "
                "pass sampled are left out.",
            )
        )
    return charts


def overview_money(
    *,
    locations: QuerySet[Location],
    leaks: QuerySet[Leak],
    now: datetime,
    window: Window | None,
    chart: str | None = None,
) -> Money:
    """The overview's money (and a location's page's, of its own location): month to date
    and forecast per account and currency, this month's leaks, and over the window: cost
    per step stacked by cluster with the forecast, leak and idle cost per step, one chart
    per currency, and GPU capacity per type. `chart`: the key of the one chart asked for
    (its CSV): what the others alone need is not read."""
    capacity = chart is None or chart.startswith(CAPACITY)  # the capacity charts asked for
    costs = chart is None or not capacity  # the cost, leak and idle charts
    stacked = chart is None or chart.startswith(COST)  # the cost by cluster asked for
    with one_snapshot():
        start = month_of(now)
        # The month's figures: its table, and the planned rate the cost charts forecast at.
        months = month_figures(group_by="account", locations=locations, now=now) if costs else []
        return Money(
            month_start=start,
            months=months,
            leaks=leak_totals(leaks=leaks, since=start, until=now) if chart is None else [],
            window=window,
            cost_charts=_overview_charts(locations, months, now, window, stacked=stacked)
            if window and costs
            else [],
            capacity_charts=_capacity_charts(locations, window, now) if window and capacity else [],
        )


def _overview_charts(
    locations: QuerySet[Location],
    months: list[MonthFigures],
    now: datetime,
    window: Window,
    *,
    stacked: bool,
) -> list[Chart]:
    """Per currency, the cost by cluster (not `stacked`: left out, a leak and idle chart's
    CSV), and the leak and idle cost."""
    # Nothing is known after now: what is read ends there (a leak still open, too).
    step, start, end = window.step, window.start, min(window.end, now)
    # The window's costliest clusters per currency are read step by step; the others are
    # what the accounts' pools cost beside them (one series per account, not per cluster).
    # Left out, no currency is lost: a pool's is its location's, whose rows are sampled
    # with its pools'.
    top: dict[str, list[int]] = {}
    by_cluster: list[CostPoint] = []
    if stacked:
        top = costliest_clusters(locations=locations, start=start, end=end, n=TOP_CLUSTERS)
        shown = [cluster for ids in top.values() for cluster in ids]
        by_cluster = cost_series(
            group_by="cluster", locations=locations, start=start, end=end, step=step,
            clusters=shown,
        )  # fmt: skip
    names = _cluster_names(by_cluster)
    by_account = cost_series(
        group_by="account", locations=locations, start=start, end=end, step=step
    )
    layers: dict[str, dict[int | None, PerStep]] = defaultdict(lambda: defaultdict(dict))
    others: dict[str, PerStep] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for point in by_cluster:
        assert point.start is not None
        if point.cluster in top[point.currency]:
            layers[point.currency][point.cluster][point.start] = point.total
            others[point.currency][point.start] -= point.total
    # What orphans cost is the leak ledger's figure (cost_series): the stacked layer and
    # the leak chart alike.
    orphans: dict[str, PerStep] = defaultdict(lambda: defaultdict(lambda: ZERO))
    idle: dict[str, PerStep] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for point in by_account:
        assert point.start is not None
        orphan = (point.orphan_vgpu or ZERO) + (point.orphan_vm or ZERO)
        orphans[point.currency][point.start] += orphan
        others[point.currency][point.start] += point.total - orphan
        idle[point.currency][point.start] += point.idle
    planned = _planned(months)
    since = forecast_from(now)
    charts: list[Chart] = []
    for currency in sorted(set(planned) | set(top) | set(orphans)):
        # Each currency's cost beside its leak and idle cost.
        if stacked:
            charts.append(
                _cost_stack(
                    key=f"{COST}{_slug(currency)}",
                    title="Cost by cluster",
                    currency=currency,
                    window=window,
                    layers=[
                        (names[cluster], layers[currency][cluster]) for cluster in top[currency]
                    ],
                    extra=[
                        ("other clusters", "others", others[currency]),
                        ("orphans", "orphans", orphans[currency]),
                    ],
                    rate_per_hour=planned[currency],
                    since=since,
                )
            )
        charts.append(
            _waste_chart(
                f"waste-{_slug(currency)}",
                "Leak and idle cost",
                currency,
                window,
                now,
                [("leaks", "leaks", orphans[currency]), ("idle GPUs", "idle", idle[currency])],
                "Leaks: the ledger's vGPUs and VMs no machine owns, from flagged to ended. "
                "Idle GPUs: attached vGPUs no pod requests, as the hourly rollups sampled them.",
            )
        )
    return charts


def _planned(months: list[MonthFigures]) -> dict[str, Decimal]:
    """The planned rate per hour of each currency: what its forecast layer adds."""
    planned: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for figure in months:
        planned[figure.point.currency] += figure.rate_planned
    return planned


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


def cluster_money(
    *, cluster: Cluster, locations: QuerySet[Location], now: datetime, window: Window | None
) -> Money:
    """A cluster page's money: its month to date and forecast per currency, and over the
    window its cost per step stacked by pool with the forecast, and its idle GPUs' cost per
    step."""
    with one_snapshot():
        start = month_of(now)
        months = month_figures(
            group_by="cluster", locations=locations, now=now, clusters=[cluster.pk]
        )
        charts = _cluster_charts(cluster, locations, months, now, window) if window else []
        return Money(month_start=start, months=months, leaks=[], window=window, cost_charts=charts)


def _cluster_charts(
    cluster: Cluster,
    locations: QuerySet[Location],
    months: list[MonthFigures],
    now: datetime,
    window: Window,
) -> list[Chart]:
    by_pool = cost_series(
        group_by="pool",
        locations=locations,
        start=window.start,
        end=min(window.end, now),
        step=window.step,
        clusters=[cluster.pk],
    )
    pools: dict[str, Layers] = defaultdict(dict)
    idle: dict[str, PerStep] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for point in by_pool:
        assert point.start is not None
        name = f"{point.pool_name} ({point.location_name})"
        layer = pools[point.currency].setdefault((point.pool, name), {})
        layer[point.start] = layer.get(point.start, ZERO) + point.total
        idle[point.currency][point.start] += point.idle
    planned = _planned(months)
    since = forecast_from(now)
    charts: list[Chart] = []
    for currency in sorted(set(planned) | set(pools)):  # each one's cost beside its idle cost
        shown, rest = _top(pools.get(currency, {}), TOP_POOLS)
        charts.append(
            _cost_stack(
                key=f"{COST}{_slug(currency)}",
                title="Cost by pool",
                currency=currency,
                window=window,
                layers=shown,
                extra=[("other pools", "others", rest)],
                rate_per_hour=planned[currency],
                since=since,
            )
        )
        charts.append(
            _waste_chart(
                f"idle-{_slug(currency)}",
                "Idle GPU cost",
                currency,
                window,
                now,
                [("idle GPUs", "idle", idle[currency])],
                "Attached vGPUs no pod requests, as the hourly rollups sampled them.",
            )
        )
    return charts
