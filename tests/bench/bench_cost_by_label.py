"""Server time of cost by label over a window: p50 and p95 of
`billing.selectors.cost_by_label_over` (what the cluster page, the API and its CSV draw)
over windows from a day by the hour to a year by the day, and of the API's answer for a
year, with the queries of each: they do not grow with the hours or the label sets.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench_labels \\
        .venv/bin/python tests/bench/bench_cost_by_label.py [--label-sets 300] [--runs 20]

The world: a cluster whose GPU pods carry ``--label-sets`` sets of labels (a team of 20,
an app each), and a small one of 10, each with a year of money history as the hourly
pass leaves it: a day row per set and day for the 365 days before today (and their months'
rows), and an hour row per set and hour for the last COST_HOURLY_HISTORY_DAYS (60) days
and today; the cluster's pool and idle rows beside them. Rows are copied in SQL from one
sample, so the benchmark does not take 10,000 samples. Asked at noon on 28 November 2026
(NOW), whenever it runs. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.models import CostRollup, LabelCostRollup, Rollup, Step  # noqa: E402
from billing.rollups import DAY, HOUR, day_of, hour_of, month_of, month_sum  # noqa: E402
from billing.selectors import cost_by_label_over  # noqa: E402
from cloud.models import Account, Location  # noqa: E402
from clusters.models import Cluster  # noqa: E402
from tests.bench.support import postgresql_missing, throwaway_database  # noqa: E402

TEAMS = 20
# The moment asked at (django.utils.timezone.now is set to it): the rows of the history,
# a figure, are the same at every run (by the clock, today's hours and the year's months
# would differ from run to run).
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
DAYS = 365
HOURLY_DAYS = 60
SMALL = 10  # the small cluster's label sets
WINDOWS = {
    "24 h by the hour": ("hour", timedelta(hours=24)),
    "7 d by the hour": ("hour", timedelta(days=7)),
    "30 d by the day": ("day", timedelta(days=30)),
    "a year by the day": ("day", timedelta(days=DAYS)),
}


def _copy(table: str, cluster: int, step: str, first: datetime, every: str, count: int) -> None:
    """Copy the cluster's `step` rows starting at `first` to each of the `count` - 1 steps
    after."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} LIMIT 0")  # noqa: S608
        columns = [c.name for c in cursor.description if c.name not in ("id", "start")]
        kept = ", ".join(columns)
        cursor.execute(
            f"INSERT INTO {table} (start, {kept}) "  # noqa: S608
            f"SELECT first.start + n * interval '{every}', {kept} "
            f"FROM {table} AS first, generate_series(1, %s) AS n "
            "WHERE first.step = %s AND first.start = %s AND first.cluster_id = %s",
            [count - 1, step, first, cluster],
        )


def _history(cluster: Cluster, location: Location, sets: int, now: datetime) -> None:
    """A year of the cluster's history: per step, a row per label set, its pool's row and
    its idle row (1 EUR an hour each; the pool 2 EUR an hour more than its GPUs' shares)."""
    today = day_of(now)
    for step, first, hours in (
        (Step.DAY, today - DAYS * DAY, 24),
        (Step.HOUR, today - HOURLY_DAYS * DAY, 1),
    ):
        at = {"step": step, "start": first, "account_id": location.account_id,
              "location_id": location.pk, "currency": "EUR"}  # fmt: skip
        LabelCostRollup.objects.bulk_create(
            LabelCostRollup(
                **at, cluster_id=cluster.pk, gpus=hours, vgpu=Decimal(hours),
                labels={"app": f"app-{n}", "team": f"team-{n % TEAMS}"},
            )
            for n in range(sets)
        )  # fmt: skip
        keys = {**at, "cluster_id": cluster.pk, "cluster_name": cluster.name}
        CostRollup.objects.bulk_create(
            [
                CostRollup(**keys, kind=CostRollup.Kind.POOL, pool_id=1, pool_name="gpu",
                           machines=sets, vgpu=Decimal((sets + 3) * hours), samples=hours),
                CostRollup(**keys, kind=CostRollup.Kind.NAMESPACE, vgpu=Decimal(hours),
                           idle=Decimal(hours), idle_gpus=hours, samples=hours),
            ]
        )  # fmt: skip
    hour_rows = (HOURLY_DAYS * 24) + int((hour_of(now) - today) / HOUR) + 1
    for table in (LabelCostRollup, CostRollup):
        name = table._meta.db_table
        _copy(name, cluster.pk, Step.DAY, today - DAYS * DAY, "1 day", DAYS)
        _copy(name, cluster.pk, Step.HOUR, today - HOURLY_DAYS * DAY, "1 hour", hour_rows)


def seed(sets: int, now: datetime) -> tuple[Cluster, Cluster]:
    account = Account.objects.create(
        name="bench", customer_id="bench", api_url="https://api.bench.example/api/1",
        iam_url="https://iam.bench.example",
        credential="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiZW5jaCJ9.c2lnbmF0dXJl",
    )  # fmt: skip
    location = Location.objects.create(account=account, name="dc-01", currency="EUR")
    big = Cluster.objects.create(account=account, name="big")
    small = Cluster.objects.create(account=account, name="small")
    _history(big, location, sets, now)
    _history(small, location, SMALL, now)
    today = day_of(now)
    Rollup.objects.bulk_create(
        [Rollup(step=Step.DAY, start=today - n * DAY, taken_at=now, samples=24)
         for n in range(1, DAYS + 1)]
        + [Rollup(step=Step.HOUR, start=hour, taken_at=now)
           for hour in _hours(today - HOURLY_DAYS * DAY, hour_of(now) + HOUR)]
    )  # fmt: skip
    month = month_of(today - DAYS * DAY)
    while month <= today:
        month_sum(month)
        month = month_of(month + timedelta(days=32))
    User.objects.create_superuser("bench", password="bench-password-1")
    return big, small


def _hours(start: datetime, end: datetime) -> list[datetime]:
    return [start + n * HOUR for n in range(int((end - start) / HOUR))]


def timed(call: Callable[[], object], runs: int) -> tuple[float, float, int]:
    """p50 and p95 in ms, and the queries of one call (its snapshot's BEGIN and COMMIT left
    out)."""
    times = []
    queries = 0
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1000)
        queries = sum(
            not q["sql"].startswith(("BEGIN", "COMMIT")) for q in captured.captured_queries
        )
    times.sort()
    return statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)], queries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label-sets", type=int, default=300)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if postgresql_missing():
        return 2
    with throwaway_database():
        now = NOW
        timezone.now = lambda: now  # type: ignore[assignment]
        started = time.perf_counter()
        big, small = seed(args.label_sets, now)
        rows = LabelCostRollup.objects.count()
        print(f"seeded {rows:,} label set rows in {time.perf_counter() - started:.0f} s")
        locations = Location.objects.all()
        results: dict[str, tuple[float, float, int]] = {}
        answered: dict[str, Any] = {}
        for name, (step, length) in WINDOWS.items():
            end = (hour_of(now) + HOUR) if step == "hour" else day_of(now) + DAY
            bounds = {"start": end - length, "end": end}
            results[name] = timed(
                lambda b=bounds: cost_by_label_over(
                    "team", cluster=big.pk, locations=locations, **b
                ),
                args.runs,
            )
            small_queries = timed(
                lambda b=bounds: cost_by_label_over(
                    "team", cluster=small.pk, locations=locations, **b
                ),
                1,
            )[2]
            answered[name] = small_queries
        year = day_of(now) + DAY - DAYS * DAY
        client = Client()
        client.force_login(User.objects.get(username="bench"))
        url = f"/api/v1/clusters/{big.pk}/cost-by-label/"
        query = {"key": "team", "start": f"{year:%Y-%m-%d}T00:00:00Z"}
        answer = client.get(url, query).json()
        assert len(answer["results"]) == TEAMS + 2, answer  # the teams, idle, the rest
        results["the API's answer, a year by the day"] = timed(
            lambda: client.get(url, query), args.runs
        )
    print(f"{args.label_sets} label sets, {rows:,} rows of label sets in the history")
    print(f"{'what':40} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
    for what, (p50, p95, queries) in results.items():
        print(f"{what:40} {p50:8.1f} {p95:8.1f} {queries:8}")
    flat = {results[name][2] for name in WINDOWS} | set(answered.values())
    summary = {
        "label_sets": args.label_sets,
        "rows": rows,
        "windows": {
            what: {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "queries": queries}
            for what, (p50, p95, queries) in results.items()
        },
        "queries_flat": len(flat) == 1,
    }
    print(json.dumps(summary, separators=(",", ":")))
    return 0 if summary["queries_flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
