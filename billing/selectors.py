"""Reading the money history (reads only): series of what things cost over time, month to date,
a forecast to the end of the month, GPU capacity over time, the leak ledger's totals, and
the checks of whitesky's bill. What orphans cost over time is the leak ledger's figure
(Leak.cost per step), not a sample: the same on every page, answer and metric. Each is a
fixed number of queries, however long the history: a day is read from its day rows once
summed, and from its hour rows until then. A series is read in one snapshot of the database
(one read-only transaction, REPEATABLE READ on PostgreSQL): a day summed while it is read is
in neither its rows nor where its hours begin, so each hour counts once.

Months are calendar months in UTC. An hour's figure is the hourly rate sampled in it
(billing.rollups); an hour no pass sampled is a gap, not an estimate, and `hours_sampled`
says how many there were.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache, wraps
from typing import Any, Literal, NamedTuple, ParamSpec, TypeVar

from django.conf import settings
from django.core.exceptions import EmptyResultSet, ValidationError
from django.db import connection, connections, transaction
from django.db.models import (
    BigIntegerField,
    Case,
    Exists,
    Expression,
    F,
    Func,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    When,
)
from django.db.models.functions import Coalesce, TruncDay, TruncMonth
from psycopg import IsolationLevel

from billing.costs import (
    EMPTY_VALUE,
    IDLE,
    NO_LABEL,
    ZERO,
    CostRow,
    GroupBy,
    LabelKeyInvalid,
    label_value,
    orphan_costs,
    pool_machine_hourly,
)
from billing.models import (
    BillCheck,
    BillItem,
    CapacityRollup,
    CostRollup,
    LabelCostRollup,
    Leak,
    Rollup,
    Step,
)
from billing.rollups import DAY, HOUR, day_of, hour_of, month_of, next_month
from capvco_web.integrations.kube import label_key_problem
from cloud.models import Location
from clusters.models import MachinePool
from gpus.models import HOURLY_PLACES

P = ParamSpec("P")
R = TypeVar("R")
SeriesStep = Literal["hour", "day", "month"]
SERIES_STEPS: tuple[SeriesStep, ...] = ("hour", "day", "month")
Kind = CostRollup.Kind
SUMS = ("machines", "compute", "vgpu", "idle", "idle_gpus")
# What each grouping reads: the rollup rows it sums, and the columns that are its key.
_GROUPS: dict[GroupBy, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "account": ((Kind.LOCATION,), ("account_id", "account__name", "currency")),
    "location": (
        (Kind.LOCATION,),
        ("account_id", "account__name", "location_id", "location__name", "currency"),
    ),
    "cluster": (
        (Kind.POOL,),
        ("account_id", "account__name", "cluster_id", "cluster_name", "currency"),
    ),
    "pool": (
        (Kind.POOL,),
        (
            "account_id", "account__name", "cluster_id", "cluster_name", "pool_id",
            "pool_name", "location_id", "location__name", "currency",
        ),
    ),
    "namespace": (
        (Kind.NAMESPACE,),
        ("account_id", "account__name", "cluster_id", "cluster_name", "namespace", "currency"),
    ),
}  # fmt: skip


@dataclass
class CostPoint(CostRow):
    """One group's cost over one step (an amount, not a rate): `start` and the step."""

    start: datetime | None = None
    hours: int = 0  # in the step
    hours_sampled: int = 0  # of those, sampled by a rollup pass (cost_history fills both)


def _in_one_snapshot(read: Callable[P, R]) -> Callable[P, R]:
    """`read` in one read-only transaction that sees one snapshot of the database, whoever
    sums a day meanwhile: where the summed days end, the month's or the days' rows and the
    hours after them are read as of its first query (a month row holds the days summed
    with it, its hours are read from the end of those), so each hour counts once. On
    PostgreSQL, REPEATABLE READ; on SQLite, any transaction's reads see one state (its
    transactions begin IMMEDIATE here: a pass summing a day waits for the read). Read
    within a caller's transaction, it reads in that one."""

    @wraps(read)
    def reading(*args: P.args, **kwargs: P.kwargs) -> R:
        with one_snapshot():
            return read(*args, **kwargs)

    return reading


# Within one snapshot, what a page asks several times (where the summed days end, the
# newest hour sampled) is read once: the snapshot's answer cannot change.
_snapshot_reads: ContextVar[dict[str, Any] | None] = ContextVar("snapshot_reads", default=None)


def _read_once(name: str, read: Callable[[], R]) -> R:
    reads = _snapshot_reads.get()
    if reads is None:
        return read()
    if name not in reads:
        reads[name] = read()
    return reads[name]  # type: ignore[no-any-return]


@contextmanager
def one_snapshot() -> Iterator[None]:
    """Reads in one read-only snapshot of the database (see `_in_one_snapshot`): a page
    that reads several series and figures of money reads them as of one moment, and asks
    what they share once. Within a caller's transaction, in that one."""
    if connection.in_atomic_block:
        yield
        return
    token = _snapshot_reads.set({})
    try:
        with _transaction():
            yield
    finally:
        _snapshot_reads.reset(token)


@contextmanager
def _transaction() -> Iterator[None]:
    if connection.vendor != "postgresql":
        with transaction.atomic():
            yield
        return
    connection.ensure_connection()
    driver = connection.connection  # idle, in autocommit: the next transaction takes these
    before = (driver.isolation_level, driver.read_only)
    driver.isolation_level, driver.read_only = IsolationLevel.REPEATABLE_READ, True
    try:
        with transaction.atomic():
            yield
    finally:
        if not driver.closed:
            driver.isolation_level, driver.read_only = before


def _located(locations: QuerySet[Location]) -> dict[int, str]:
    """The locations' ids and names, read once a snapshot: each query of a page's money
    narrows its rows by these ids as literals (the locations' own filter as a subquery is
    a join of every row read, some milliseconds over a year's tens of thousands)."""
    try:
        asked = f"located:{locations.query}"
    except EmptyResultSet:  # of no location
        return {}
    return _read_once(asked, lambda: dict(locations.order_by().values_list("pk", "name")))


def _summed_until() -> datetime:
    """The end of the newest day summed (asked several times a page: once a snapshot)."""
    return _read_once("summed_until", _newest_day_end)


def _newest_day_end() -> datetime:
    newest_day = f"SELECT MAX(start) FROM {Rollup._meta.db_table} WHERE step = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(newest_day, [Step.DAY])
        newest: object = cursor.fetchone()[0]
    if newest is None:
        return datetime(1970, 1, 1, tzinfo=UTC)
    if isinstance(newest, str):  # SQLite keeps text
        newest = datetime.fromisoformat(newest)
    assert isinstance(newest, datetime)
    return (newest if newest.tzinfo else newest.replace(tzinfo=UTC)) + DAY


def _series_rows(step: SeriesStep, start: datetime, end: datetime) -> tuple[Q, Expression]:
    """The rows to read for [start, end) by `step`, as one filter, and where each row's
    step starts, in seconds (`Epoch`): the summed days' rows, then the hours after them,
    in one query. By the month, a month the range holds whole is read from its month row
    (which holds its days summed so far), not its days; by the day, a day row starts its
    day and only the hours are truncated. Read in one snapshot (`_in_one_snapshot`): a day
    summed meanwhile is in neither the rows read nor where the hours begin."""
    in_range = Q(start__gte=start, start__lt=end)
    if step == "hour":
        return Q(step=Step.HOUR) & in_range, Epoch(F("start"))
    summed_until = _summed_until()
    hours = Q(step=Step.HOUR) & in_range & Q(start__gte=summed_until)
    days = Q(step=Step.DAY) & in_range & Q(start__lt=summed_until)
    if step == "day":
        day = Epoch(TruncDay("start", tzinfo=UTC))
        return days | hours, Case(When(step=Step.HOUR, then=day), default=Epoch(F("start")))
    first, whole_until = _whole_months(start, end, summed_until)
    if whole_until > first:
        months = Q(start__gte=first, start__lt=whole_until)
        days = (Q(step=Step.MONTH) & months) | (days & ~months)
    return days | hours, Epoch(TruncMonth("start", tzinfo=UTC))


def _covering(start: datetime, end: datetime) -> Q:
    """The fewest rows whose sum is [start, end) (whole hours), for a total over it: the
    months it holds whole from their month rows, the other days it holds whole and that are
    summed from their day rows, the hours beside them (a range by the hour starts within a
    day) and after the days summed from their hours."""
    summed_until = _summed_until()
    first = start if start == day_of(start) else day_of(start) + DAY
    until = max(first, min(day_of(end), summed_until))  # the days held whole and summed
    days = Q(start__gte=first, start__lt=until)
    # The hours before those days and after them, as two ranges an index reads (the hours
    # of summed days are kept a while: read and left out, they cost a scan of them all).
    rows = Q(step=Step.HOUR, start__gte=start, start__lt=min(first, end)) | Q(
        step=Step.HOUR, start__gte=until, start__lt=end
    )
    if until > first:
        month_first, month_until = _whole_months(first, until, summed_until)
        months = Q(start__gte=month_first, start__lt=month_until)
        rows |= (Q(step=Step.MONTH) & months) | (Q(step=Step.DAY) & days & ~months)
    return rows


def _whole_months(start: datetime, end: datetime, summed: datetime) -> tuple[datetime, datetime]:
    """[first, until): the months of [start, end) whose days summed so far (before
    `summed`) it holds whole; first == until: none."""
    first = start if start == month_of(start) else next_month(start)
    until, month = first, first
    while month < summed and min(next_month(month), summed) <= end:
        until = min(next_month(month), summed)
        month = next_month(month)
    return first, until


class Epoch(Func):
    """A moment as whole seconds since 1970 (UTC), read as an integer: Django reads a
    timestamp with a loader written in Python, some microseconds each, and a year of a
    page's series is thousands of rows."""

    output_field = BigIntegerField()
    template = "CAST(EXTRACT(EPOCH FROM %(expressions)s) AS BIGINT)"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # strftime's %s, its % doubled for the query's own formatting and for the driver.
        template = "CAST(strftime('%%%%s', %(expressions)s) AS INTEGER)"
        return self.as_sql(compiler, connection, template=template, **extra)


def _tuples(rows: QuerySet[Any]) -> Iterable[tuple[Any, ...]]:
    """A values_list query's rows. On PostgreSQL as the driver reads them (integers, text,
    numerics as Decimal: what Django's converters would make of them), without a pass
    through the converters per value: a year of a page's series is thousands of rows."""
    db = connections[rows.db]
    if db.vendor != "postgresql":
        return rows
    try:
        sql, params = rows.query.get_compiler(using=rows.db).as_sql()
    except EmptyResultSet:  # a filter nothing matches (no cluster asked for): no query
        return []
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        found: list[tuple[Any, ...]] = cursor.fetchall()
    return found


@lru_cache(maxsize=4096)
def _utc(seconds: int) -> datetime:
    """The moment `seconds` after 1970 (UTC); the same few hundred, again and again."""
    return datetime.fromtimestamp(seconds, UTC)


@_in_one_snapshot
def cost_series(
    *,
    group_by: GroupBy,
    locations: QuerySet[Location],
    start: datetime,
    end: datetime,
    step: SeriesStep,
    clusters: Collection[int] | None = None,
) -> list[CostPoint]:
    """Per step in [start, end) and group: what it cost, ordered by time then group;
    only the rows of `clusters` when given (a cluster's page reads its own through an
    index). Two queries (one for `hour`; the leaks' once a snapshot)."""
    kinds, keys = _GROUPS[group_by]
    # By (start in seconds, the group's keys): a year by the day is thousands of rows, each
    # read as a tuple and made a point once, and sorted by an integer, not an aware
    # datetime (compared through their offsets).
    points: dict[tuple[int, tuple[Any, ...]], CostPoint] = {}
    new_point = _point_maker(group_by, keys)
    where, step_start = _series_rows(step, start, end)
    located = _located(locations)
    rows = CostRollup.objects.filter(where, kind__in=kinds, location_id__in=located).order_by()
    if clusters is not None:
        rows = rows.filter(cluster_id__in=clusters)
    sums = (
        rows.annotate(at=step_start).values_list("at", *keys).annotate(**{n: Sum(n) for n in SUMS})
    )
    for at, *keyed, machines, compute, vgpu, idle, idle_gpus in _tuples(sums):
        group = tuple(keyed)
        points[at, group] = new_point(_utc(at), group, machines, compute, vgpu, idle, idle_gpus)
    if group_by in ("account", "location"):
        # Orphans are the ledger's leaks, counted as the ledger counts them, not sampled.
        for (moment, location), (vgpu, vm) in leak_costs_by_step(
            location_ids=located, step=step, start=start, end=end
        ).items():
            row = {
                "account_id": location.account_id,
                "account__name": location.account.name,
                "location_id": location.pk,
                "location__name": location.name,
                "currency": location.currency,
            }
            key = (int(moment.timestamp()), tuple(row[k] for k in keys))
            point = points.get(key)
            if point is None:
                point = points[key] = _point(group_by, moment, row)
            point.orphan_vgpu = (point.orphan_vgpu or ZERO) + vgpu
            point.orphan_vm = (point.orphan_vm or ZERO) + vm
    # By time, then by the group's keys as text (ids and names, some of them None): the
    # groups ranked once, each point sorted by one integer (thousands of tuples compared
    # item by item cost milliseconds).
    groups = sorted({group for _, group in points}, key=lambda group: tuple(map(str, group)))
    rank = {group: n for n, group in enumerate(groups)}
    ordered = sorted(points.items(), key=lambda item: item[0][0] * len(rank) + rank[item[0][1]])
    return [point.finish() for _, point in ordered]  # type: ignore[misc]


@_in_one_snapshot
def costliest_clusters(
    *, locations: QuerySet[Location], start: datetime, end: datetime, n: int
) -> dict[str, list[int]]:
    """Per currency: the `n` clusters that cost most in [start, end), costliest first (a
    tie by id: the older first): each row's total alone, of the fewest rows that make up
    the range (_covering). Two queries."""
    rows = (
        CostRollup.objects.filter(
            _covering(start, end), kind=Kind.POOL, location_id__in=_located(locations)
        )
        .order_by()
        .values_list("currency", "cluster_id")
        # A pool row has no orphans: its total is compute and vGPUs.
        .annotate(cost=Sum(F("compute") + F("vgpu")))
    )
    ranked: dict[str, list[int]] = defaultdict(list)
    for currency, cluster, _ in sorted(_tuples(rows), key=lambda row: (-row[2], row[1])):
        if len(ranked[currency]) < n:
            ranked[currency].append(cluster)
    return ranked


# The row of what a cluster cost that no pod's label can claim.
NOT_ATTRIBUTED = "(not attributed)"


@dataclass
class LabelCostTotal:
    """One value of a pod label in one currency over a window: the GPU-hours its pods
    requested on the cluster's GPU nodes and their share of what those nodes' attached
    vGPUs cost; or the pods without the label; or the idle GPUs; or what the cluster cost
    besides (`not_attributed`)."""

    currency: str
    value: str | None  # None: the pods without the label, the idle GPUs, or the rest
    idle: bool = False
    not_attributed: bool = False
    gpu_hours: int | None = 0  # None on the rest, which is not GPUs alone
    cost: Decimal = ZERO

    @property
    def name(self) -> str:
        if self.idle:
            return IDLE
        if self.not_attributed:
            return NOT_ATTRIBUTED
        if self.value is None:
            return NO_LABEL
        return self.value or EMPTY_VALUE


@dataclass
class LabelCostHistory:
    """What a cluster cost over [start, end) by the value of one pod label, and how many of
    the window's hours a rollup pass sampled."""

    key: str
    start: datetime
    end: datetime
    hours: int
    hours_sampled: int
    rows: list[LabelCostTotal]


@_in_one_snapshot
def cost_by_label_over(
    key: str, *, cluster: int, locations: QuerySet[Location], start: datetime, end: datetime
) -> LabelCostHistory:
    """What the cluster cost over [start, end) (whole hours), by the value of the pod label
    `key`: per currency, each value's pods' share of its GPU nodes' attached vGPUs summed
    over the hours sampled (billing.costs' rule, as per namespace, from the label sets each
    hourly sample keeps: LabelCostRollup), then the pods without the label, then the idle
    GPUs (the namespace rows' idle), then what the cluster cost besides (its machines'
    vCPUs and memory, billed vGPUs on no GPU node, and the shares of hours sampled before
    label sets were kept): the rows add up to its cost over the window as cost_series says
    it. Of its history in `locations`, the fewest rows that make up the window (_covering).
    Five queries, however many pods and hours.

    Raises LabelKeyInvalid, naming the problem, when `key` is not a label key."""
    if problem := label_key_problem(key):
        raise LabelKeyInvalid(problem)
    ours = {"cluster_id": cluster, "location__in": locations}
    shares = (
        LabelCostRollup.objects.filter(_covering(start, end), **ours)
        .annotate(value=label_value(key))
        .order_by()
        .values_list("currency", "value")
        .annotate(gpus=Sum("gpus"), vgpu=Sum("vgpu"))
    )
    costs = (
        CostRollup.objects.filter(_covering(start, end), **ours)
        .filter(Q(kind=Kind.POOL) | Q(kind=Kind.NAMESPACE, namespace__isnull=True))
        .order_by()
        .values_list("currency", "kind")
        .annotate(cost=Sum(F("compute") + F("vgpu")), idle_gpus=Sum("idle_gpus"))
    )
    rows: dict[tuple[str, int, str], LabelCostTotal] = {}
    rest: dict[str, Decimal] = defaultdict(lambda: ZERO)  # the pools' cost, less the above
    for currency, value, gpus, vgpu in shares:
        # Values by name, then the pods without the label.
        rows[currency, 0 if value is not None else 1, value or ""] = LabelCostTotal(
            currency, value, gpu_hours=gpus, cost=vgpu
        )
        rest[currency] -= vgpu
    for currency, kind, total, idle_gpus in costs:
        if kind == Kind.NAMESPACE:
            rows[currency, 2, ""] = LabelCostTotal(
                currency, None, idle=True, gpu_hours=idle_gpus, cost=total
            )
            rest[currency] -= total
        else:
            rest[currency] += total
    for currency, cost in rest.items():
        if cost.quantize(HOURLY_PLACES):  # less than rounds to 0.0001 is rounding
            rows[currency, 3, ""] = LabelCostTotal(
                currency, None, not_attributed=True, gpu_hours=None, cost=cost
            )
    for row in rows.values():
        row.cost = row.cost.quantize(HOURLY_PLACES)
    return LabelCostHistory(
        key=key,
        start=start,
        end=end,
        hours=int((end - start) / HOUR),
        hours_sampled=hours_sampled(start, end),
        rows=[rows[k] for k in sorted(rows)],
    )


# What one request for a series may span: two years, whatever the step, and at most this
# many rows (steps times groups), so an answer stays a few megabytes.
SERIES_RANGE_DAYS = 731
SERIES_ROWS_MAX = 10_000


def step_start(step: SeriesStep, moment: datetime) -> datetime:
    """The start of the step (hour, UTC day or UTC month) that `moment` falls in."""
    if step == "hour":
        return hour_of(moment)
    return day_of(moment) if step == "day" else month_of(moment)


def step_after(step: SeriesStep, start: datetime) -> datetime:
    """The start of the step after the one starting at `start`."""
    if step == "hour":
        return start + HOUR
    return start + DAY if step == "day" else next_month(start)


def series_bounds(*, step: SeriesStep, start: datetime, end: datetime, now: datetime) -> None:
    """What a series may span, for the API and the dashboard's windows alike: [start, end)
    in whole steps, at most SERIES_RANGE_DAYS, and by the hour only within the hours kept
    (COST_HOURLY_HISTORY_DAYS). Refused (ValidationError naming the parameter) otherwise."""
    problems: dict[str, str] = {}
    for name, moment in (("start", start), ("end", end)):
        if moment != step_start(step, moment):
            problems[name] = f"Give the start of {'an' if step == 'hour' else 'a'} {step} (UTC)."
    if end <= start:
        problems.setdefault("end", "Give an end after the start (the end is exclusive).")
    elif end - start > timedelta(days=SERIES_RANGE_DAYS):
        problems.setdefault("end", f"Ask for at most {SERIES_RANGE_DAYS} days at a time.")
    kept_from = hour_of(now) - timedelta(days=settings.COST_HOURLY_HISTORY_DAYS)
    if step == "hour" and start < kept_from:
        problems.setdefault(
            "start",
            f"Hours are kept {settings.COST_HOURLY_HISTORY_DAYS} days (from "
            f"{kept_from:%Y-%m-%dT%H:%MZ}): give a later start, or step by the day.",
        )
    if problems:
        raise ValidationError(problems)


@dataclass
class CostSeries:
    """What each group cost per step in [start, end), and how many of the range's hours a
    rollup pass sampled (each point says its own step's)."""

    step: SeriesStep
    start: datetime
    end: datetime
    hours_sampled: int
    points: list[CostPoint]


@_in_one_snapshot
def cost_history(
    *,
    group_by: GroupBy,
    locations: QuerySet[Location],
    step: SeriesStep,
    start: datetime,
    end: datetime | None = None,
    now: datetime,
) -> CostSeries:
    """The series of `cost_series` for a request: [start, end) in whole steps (`end`
    left out: the end of the step now running), within the history kept and the bounds
    above. Refused (ValidationError naming the parameter) otherwise. Four queries."""
    end = end if end is not None else step_after(step, step_start(step, now))
    series_bounds(step=step, start=start, end=end, now=now)
    points = cost_series(group_by=group_by, locations=locations, start=start, end=end, step=step)
    if len(points) > SERIES_ROWS_MAX:
        raise ValidationError(
            {
                "step": f"{len(points):,} rows: at most {SERIES_ROWS_MAX:,} are answered at "
                "once. Take a longer step, a shorter range, or filter by account or location."
            }
        )
    sampled = hours_sampled_by_step(step, start, end)
    for point in points:
        assert point.start is not None
        point.hours = int((step_after(step, point.start) - point.start) / HOUR)
        point.hours_sampled = sampled.get(point.start, 0)
    return CostSeries(step, start, end, sum(sampled.values()), points)


# CostRow's first fields: a group's keys, in their order.
_KEY_FIELDS = (
    "currency", "account_id", "account__name", "location_id", "location__name", "cluster_id",
    "cluster_name", "pool_id", "pool_name", "namespace",
)  # fmt: skip


def _point_maker(
    group_by: GroupBy, keys: tuple[str, ...]
) -> Callable[[datetime, tuple[Any, ...], int, Decimal, Decimal, Decimal, int], CostPoint]:
    """What makes a point of a row of cost_series' sums: its group's keys (`keys`, in their
    order) and its sums. A group's keys are laid out as CostRow's first fields once (a year
    by the day is hundreds of steps per group)."""
    at = [keys.index(name) if name in keys else None for name in _KEY_FIELDS]
    orphans = ZERO if group_by in ("account", "location") else None
    namespace = group_by == "namespace"
    laid_out: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def make(
        start: datetime,
        group: tuple[Any, ...],
        machines: int,
        compute: Decimal,
        vgpu: Decimal,
        idle: Decimal,
        idle_gpus: int,
    ) -> CostPoint:
        fields = laid_out.get(group)
        if fields is None:
            fields = laid_out[group] = tuple(None if i is None else group[i] for i in at)
        return CostPoint(  # type: ignore[call-arg]  # the keys laid out: ten fields
            *fields,
            None if namespace else ZERO + compute,  # compute
            ZERO + vgpu,
            idle_gpus,
            ZERO + idle,
            orphans,  # orphan_vgpu
            orphans,  # orphan_vm
            machines,
            ZERO,  # total: finish() sums it
            start,
        )

    return make


def _point(group_by: GroupBy, start: datetime, row: dict[str, Any]) -> CostPoint:
    """A point of the group that `row` names (by _GROUPS' names), of no cost yet."""
    return _point_maker(group_by, tuple(row))(start, tuple(row.values()), 0, ZERO, ZERO, ZERO, 0)


def _zero(group_by: GroupBy, start: datetime, row: CostRow) -> CostPoint:
    """A group that costs now and cost nothing yet this month."""
    keys = {"currency": row.currency, "account_id": row.account, "account__name": row.account_name,
            "cluster_id": row.cluster, "cluster_name": row.cluster_name}  # fmt: skip
    return _point(group_by, start, keys).finish()  # type: ignore[return-value]


def hours_sampled(start: datetime, end: datetime) -> int:
    """Hours in [start, end) that a rollup pass sampled."""
    return sum(hours_sampled_by_step("day", start, end).values())


def forecast_from(now: datetime) -> datetime:
    """Where a forecast starts: the end of this hour once the hour is sampled (its sample
    counts the whole hour in what was spent), else its start. The same all hour long, so
    every page and answer of the hour forecasts alike."""
    hour = hour_of(now)
    return hour + HOUR if newest_hour_sampled(now) == hour else hour


def newest_hour_sampled(now: datetime) -> datetime | None:
    """The newest hour up to now's that a rollup pass sampled (None: none yet). Its rows
    hold the rates of that hour: what the money pages take as the rate now."""
    hour = hour_of(now)

    def newest() -> datetime | None:
        found: datetime | None = Rollup.objects.filter(step=Step.HOUR, start__lte=hour).aggregate(
            newest=Max("start")
        )["newest"]
        return found

    return _read_once(f"newest_hour:{hour.isoformat()}", newest)


@dataclass
class MonthFigures:
    """A group's month: spent so far, the rate now and the rate its pools' replicas imply,
    and where the month ends at that rate."""

    point: CostPoint  # the group's keys and what it cost so far this month
    month_start: datetime
    hours_sampled: int
    hours_left: Decimal
    rate_now: Decimal  # per hour, as the newest hour sampled has it (orphans: as now)
    rate_planned: Decimal  # per hour, once every pool has its replicas
    forecast: Decimal = field(default=ZERO)


@_in_one_snapshot
def month_figures(
    *,
    group_by: Literal["account", "cluster"],
    locations: QuerySet[Location],
    now: datetime,
    clusters: Collection[int] | None = None,
) -> list[MonthFigures]:
    """Month to date and a forecast to the month's end, per account or cluster and
    currency: what was spent, plus the planned rate (the rate now, with each pool's
    missing or surplus machines at its list price) times the hours left after the hours
    sampled (forecast_from). The rate now is the newest hourly sample's (billing.rollups:
    what the pass computed and stored, not computed again per request), with the orphans
    an account's locations hold now. With `clusters` (by cluster only), theirs alone. A
    fixed number of queries, however many machines and however long the history."""
    start = month_of(now)
    spent = {
        _key(group_by, p): p
        for p in cost_series(
            group_by=group_by, locations=locations, start=start, end=now, step="month",
            clusters=clusters,
        )
    }  # fmt: skip
    pools = MachinePool.objects.filter(site__location__in=locations)
    if clusters is not None:
        assert group_by == "cluster", "clusters narrow a month by cluster only"
        pools = pools.filter(cluster__in=clusters)
    # The newest hour sampled; none yet: this hour, of no rows (every replica missing).
    hour = newest_hour_sampled(now) or hour_of(now)
    rates = _sampled_rates(group_by, locations, hour, clusters)
    planned = _planned_deltas(group_by, pools, hour)
    sampled = hours_sampled(start, now)
    left = Decimal((next_month(now) - forecast_from(now)).total_seconds()) / Decimal(3600)
    figures: dict[tuple[Any, ...], MonthFigures] = {}
    for row in rates:
        key = _key(group_by, row)
        point = spent.pop(key, None) or _zero(group_by, start, row)
        delta = planned.get(key, ZERO)
        figures[key] = MonthFigures(
            point=point,
            month_start=start,
            hours_sampled=sampled,
            hours_left=left,
            rate_now=row.total,
            rate_planned=max(row.total + delta, ZERO),
        )
    for key, point in spent.items():  # groups that cost this month and are gone now
        figures[key] = MonthFigures(point, start, sampled, left, ZERO, ZERO)
    for figure in figures.values():
        figure.forecast = (figure.point.total + figure.rate_planned * left).quantize(
            Decimal("0.01")
        )
    return [figures[key] for key in sorted(figures, key=lambda k: tuple(map(str, k)))]


def _sampled_rates(
    group_by: Literal["account", "cluster"],
    locations: QuerySet[Location],
    hour: datetime,
    clusters: Collection[int] | None,
) -> list[CostRow]:
    """Per account or cluster and currency: what it cost per hour in `hour`'s sample (a
    row of each location by account, of each pool by cluster: every location and pool the
    pass saw, 0 when nothing cost), and by account the orphans the locations hold now
    flagged now (billing.costs.orphan_costs). One query,
    and three for the orphans."""
    kinds, keys = _GROUPS[group_by]
    rows: dict[tuple[Any, ...], CostPoint] = {}
    sample = CostRollup.objects.filter(
        step=Step.HOUR, start=hour, kind__in=kinds, location_id__in=_located(locations)
    ).order_by()
    if clusters is not None:
        sample = sample.filter(cluster_id__in=clusters)
    for row in sample.values(*keys).annotate(compute=Sum("compute"), vgpu=Sum("vgpu")):
        point = rows[_row_key(group_by, row)] = _point(group_by, hour, row)
        point.compute, point.vgpu = row["compute"], row["vgpu"]
    if group_by == "account":
        for orphans in orphan_costs(locations):
            key = (orphans.account_id, orphans.currency)
            if key not in rows:  # a location made since the sample
                names = {"account_id": orphans.account_id, "currency": orphans.currency,
                         "account__name": orphans.account_name}  # fmt: skip
                rows[key] = _point(group_by, hour, names)
            point = rows[key]
            point.orphan_vgpu = (point.orphan_vgpu or ZERO) + orphans.vgpu
            point.orphan_vm = (point.orphan_vm or ZERO) + orphans.vm
    return [point.finish() for point in rows.values()]


def _row_key(group_by: str, row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["account_id" if group_by == "account" else "cluster_id"], row["currency"])


def _key(group_by: str, row: CostRow) -> tuple[Any, ...]:
    group = row.account if group_by == "account" else row.cluster
    return (group, row.currency)


def _planned_deltas(
    group_by: Literal["account", "cluster"], pools: QuerySet[MachinePool], hour: datetime
) -> dict[tuple[Any, ...], Decimal]:
    """Per (account or cluster, currency): what the pools' machines missing from `hour`'s
    sample would add per hour at list price (negative for surplus ones): the sampled rate
    with each pool at its replicas. Only pools whose sampled machines are not their
    replicas are read."""
    deltas: dict[tuple[Any, ...], Decimal] = defaultdict(lambda: ZERO)
    sample = CostRollup.objects.filter(
        step=Step.HOUR,
        start=hour,
        kind=Kind.POOL,
        cluster_id=OuterRef("cluster_id"),
        pool_id=OuterRef("pk"),
    )
    # As anti-joins of the hour's pool rows (a subquery per pool is an index probe each):
    # a pool sampled with its replicas, or with none and none sampled, is as planned.
    differing = (
        pools.exclude(Exists(sample.filter(machines=OuterRef("replicas"))))
        .exclude(Q(replicas=0) & ~Exists(sample))
        .annotate(machine_count=Coalesce(Subquery(sample.values("machines")[:1]), 0))
        .select_related("site__location", "cluster")
    )
    for pool in differing:
        missing = pool.replicas - pool.machine_count
        location = pool.site.location
        group = pool.cluster.account_id if group_by == "account" else pool.cluster_id
        deltas[group, location.currency] += missing * pool_machine_hourly(pool)
    return deltas


class CapacityPoint(NamedTuple):
    """A tuple (a year of a page's charts makes thousands), its figures last, in the order
    of CAPACITY_FIGURES."""

    start: datetime
    location: int | None  # None: the locations summed
    location_name: str
    gpu_type: str
    free: Decimal  # the mean over the step's samples
    reserved: Decimal
    attached: Decimal
    allocatable: Decimal
    requested: Decimal


CAPACITY_FIGURES = ("free", "reserved", "attached", "allocatable", "requested")


@_in_one_snapshot
def capacity_series(
    *,
    locations: QuerySet[Location],
    start: datetime,
    end: datetime,
    step: SeriesStep,
    per_location: bool = True,
) -> list[CapacityPoint]:
    """Per step, location (or the locations summed) and GPU type: the mean of each figure
    over the step's samples."""
    sums: dict[tuple[int, int | None, str], list[int]] = {}
    located = _located(locations)
    names: dict[int | None, str] = {pk: name for pk, name in located.items()}
    names[None] = ""  # the locations summed
    keys = ("location_id", "gpu_type") if per_location else ("gpu_type",)
    figures = {n: Sum(n) for n in CAPACITY_FIGURES}
    where, step_start = _series_rows(step, start, end)
    rows = CapacityRollup.objects.filter(where, location_id__in=located).order_by()
    for at, *group in _tuples(
        rows.annotate(at=step_start).values_list("at", *keys).annotate(**figures)
    ):
        sums[at, group[0] if per_location else None, group[len(keys) - 1]] = group[len(keys) :]
    # The mean over the hours sampled in each bucket, whatever type was seen in them.
    samples = hours_sampled_by_step(step, start, end)
    points = []
    # By time, then location and type: each (location, type) ranked once, each point
    # sorted by one integer (as cost_series).
    kinds = sorted({key[1:] for key in sums}, key=lambda kind: (names[kind[0]], kind[1]))
    rank = {kind: n for n, kind in enumerate(kinds)}
    for (at, location_id, gpu_type), values in sorted(
        sums.items(), key=lambda item: item[0][0] * len(rank) + rank[item[0][1:]]
    ):
        period = _utc(at)
        n = max(samples.get(period, 0), 1)
        free, reserved, attached, allocatable, requested = values
        points.append(
            CapacityPoint(
                period, location_id, names[location_id], gpu_type, _mean(free, n),
                _mean(reserved, n), _mean(attached, n), _mean(allocatable, n),
                _mean(requested, n),
            )
        )  # fmt: skip
    return points


@lru_cache(maxsize=4096)
def _mean(total: int, n: int) -> Decimal:
    """total / n to the cent, rounded half to even as Decimal.quantize does (in integers,
    and each pair once: a year's charts have thousands, of a few figures)."""
    cents, rest = divmod(total * 100, n)
    if 2 * rest > n or (2 * rest == n and cents % 2):
        cents += 1
    return Decimal(cents).scaleb(-2)


def hours_sampled_by_step(step: SeriesStep, start: datetime, end: datetime) -> dict[datetime, int]:
    """Per step in [start, end) (by its start): the hours a rollup pass sampled, from the
    day markers for the days summed (their hours are pruned in time) and from the hour
    markers after them. Two queries (one by hour: hours are asked for while kept)."""
    hours = Rollup.objects.filter(step=Step.HOUR).order_by()
    if step == "hour":
        sampled = hours.filter(start__gte=start, start__lt=end)
        return {_utc(at): n for at, n in sampled.values_list(Epoch("start"), "samples")}
    summed_until = min(max(_summed_until(), start), end)
    days = Rollup.objects.filter(step=Step.DAY).order_by()
    bucket = (TruncDay if step == "day" else TruncMonth)("start", tzinfo=UTC)
    counts: dict[datetime, int] = defaultdict(int)
    for markers in (
        days.filter(start__gte=start, start__lt=summed_until),
        hours.filter(start__gte=summed_until, start__lt=end),
    ):
        for at, n in (
            markers.annotate(at=Epoch(bucket))
            .values("at")
            .annotate(n=Sum("samples"))
            .values_list("at", "n")
        ):
            counts[_utc(at)] += n
    return counts


# What Leak.cost reads: a leak's price, its span, and its location's last complete look.
LEAK_COST_FIELDS = (
    "currency", "monthly_price", "leaked_since", "ended_at",
    "location__last_complete_observation_at",
)  # fmt: skip


@dataclass(frozen=True)
class LeakTotal:
    account: int
    account_name: str
    currency: str
    cost: Decimal  # within the period
    open: int
    ended: int  # ended within the period


def leak_costs_by_step(
    *, location_ids: Collection[int], step: SeriesStep, start: datetime, end: datetime
) -> dict[tuple[datetime, Location], tuple[Decimal, Decimal]]:
    """Per step in [start, end) and location (with its account): what the leaks of the
    locations cost in it (vGPUs, VMs), by Leak.cost (once a leak for the hours or days it
    leaks all through: each costs the same). One query, once a snapshot: a page asks for its
    month and its window (the ledger keeps ended leaks COST_HISTORY_DAYS, a window spans at
    most two years)."""
    if not location_ids:
        return {}
    read = (
        Leak.objects.filter(location_id__in=location_ids)
        .select_related("location__account")
        .only(
            *LEAK_COST_FIELDS, "kind", "location__name", "location__currency",
            "location__account_id", "location__account__name",
        )
    )  # fmt: skip
    asked = f"leaks:{sorted(location_ids)}"  # the same locations' leaks read once a snapshot
    found: dict[tuple[datetime, int], list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    located: dict[int, Location] = {}
    for leak in _read_once(asked, lambda: list(read)):
        if leak.leaked_since >= end or (leak.ended_at is not None and leak.ended_at <= start):
            continue
        located[leak.location_id] = leak.location
        vm = leak.kind == Leak.Kind.VM
        until = min(leak.counted_until(), end)
        moment = step_start(step, max(leak.leaked_since, start))
        whole: Decimal | None = None  # a step it leaks all through (an hour or a day) costs
        while moment < until:
            after = step_after(step, moment)
            if step != "month" and leak.leaked_since <= moment and after <= until:
                whole = whole if whole is not None else leak.cost(since=moment, until=after)
                found[moment, leak.location_id][vm] += whole
            else:
                found[moment, leak.location_id][vm] += leak.cost(
                    since=moment, until=min(after, end)
                )
            moment = after
    return {(moment, located[pk]): (vgpu, vm) for (moment, pk), (vgpu, vm) in found.items()}


def leak_totals(*, leaks: QuerySet[Leak], since: datetime, until: datetime) -> list[LeakTotal]:
    """Per account and currency: what leaks cost within [since, until), how many are
    still open and how many ended in it ("leaks cost 41.20 EUR this month, 3 still
    open"). One query."""
    overlapping = leaks.filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=since), leaked_since__lt=until
    )
    totals: dict[tuple[int, str, str], list[Any]] = defaultdict(lambda: [ZERO, 0, 0])
    rows = (
        overlapping.select_related(None)
        .select_related("account", "location")
        .only(*LEAK_COST_FIELDS, "account__name")
    )
    for leak in rows:
        total = totals[leak.account_id, leak.account.name, leak.currency]
        total[0] += leak.cost(since=since, until=until)
        if leak.ended_at is None:
            total[1] += 1
        elif leak.ended_at < until:
            total[2] += 1
    return [
        LeakTotal(account, name, currency, cost.quantize(Decimal("0.01")), n_open, n_ended)
        for (account, name, currency), (cost, n_open, n_ended) in sorted(
            totals.items(), key=lambda item: (item[0][1], item[0][0], item[0][2])
        )
    ]


def bill_checks_latest(locations: QuerySet[Location]) -> dict[int, BillCheck]:
    """Per location (pk): its newest checked hour of whitesky's bill (billing.bills), with
    its leak and unexplained items prefetched as `items`, costliest first. A location
    never checked has no entry. Two queries."""
    newest = (
        BillCheck.objects.filter(location=OuterRef("location")).order_by("-start").values("start")
    )
    checks = (
        BillCheck.objects.filter(location__in=locations, start=Subquery(newest[:1]))
        .select_related("location")
        .prefetch_related(
            Prefetch("items", queryset=BillItem.objects.order_by("-cost", "kind", "external_id"))
        )
    )
    return {check.location_id: check for check in checks}
