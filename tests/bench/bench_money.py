"""Server time of the pages that draw money over time, with a year of history: p50 and p95
of the overview (its money section included), a location's page, a cluster page and a
chart's CSV, as they open and over the windows picked on them.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_money.py [--clusters 1000] [--day 28] [--runs 40]

The world: 10 locations with 5 GPU types each (a card per type), ``--clusters`` clusters of
one pool of one running machine (its VM listed, one vGPU attached), spread over the
locations, and 100 orphaned vGPUs with their open leaks. The history: one real rollup of
that world (billing.rollups), copied as day rows for the 365 days before the month, as
day rows for each day of the month before ``--day``, and as hourly rows for the 60 days
before that day (the hours kept by default) and for that day's hours so far; each month's
rows are summed from its day rows (billing.rollups.month_sum). The pages are
asked at 12:00 UTC on ``--day`` of this month (django.utils.timezone.now is set to it: the
later in the month, the more days the month's charts read), through Django's test client
by an admin of the account: as they open (this month by the day), and over windows picked
(billing.windows): the last 24 hours and 7 days by the hour (a week at most), the last 24
hours and 30 days by the day, and a year (366 days) by the day.

Target (issue 19): p95 at most 150 ms, queries not growing with history nor with the
window's length (24 h, 30 d and a year by the day the same count; 24 h and 7 d by the hour
too). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import DatabaseError, connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.leaks import leaks_record  # noqa: E402
from billing.models import CapacityRollup, CostRollup, Rollup, Step  # noqa: E402
from billing.rollups import DAY, HOUR, month_of, month_sum, rollups_take  # noqa: E402
from capvco_web.celery import startup_objects_freeze  # noqa: E402
from cloud.models import Account, Location, Membership, VirtualMachine  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from gpus.models import GpuProfile, ListedVgpu, VgpuReservation  # noqa: E402
from tests.bench.support import page_queries  # noqa: E402

LOCATIONS = 10
TYPES = 5
ORPHANS = 100
YEAR = 365
HOURLY_DAYS = 60
TARGET_MS = 150.0
BATCH = 5000
COPY_STARTS = 50  # starts copied per INSERT


def seed(clusters: int, now: datetime) -> dict[str, Any]:
    account = Account.objects.create(
        name="bench", customer_id="bench", api_url="https://api.bench.example/api/1",
        iam_url="https://iam.bench.example",
        credential="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiZW5jaCJ9.c2lnbmF0dXJl",
    )  # fmt: skip
    locations = [
        Location.objects.create(
            account=account, name=f"dc-{i:02}", currency="EUR",
            vgu_price=Decimal("730"), prices={"vcu": 7.30, "mu": 3.65, "vgu": 730},
            observation_complete=True, observation_started_at=now,
            last_complete_observation_at=now,
        )
        for i in range(LOCATIONS)
    ]  # fmt: skip
    GpuProfile.objects.bulk_create(
        GpuProfile(location=location, profile_id=f"card-{t}", vendor="NVIDIA",
                   model=f"T{t} 0000:0{t}:00.0", available_instances=4)
        for location in locations for t in range(TYPES)
    )  # fmt: skip
    for n in range(clusters):
        location = locations[n % LOCATIONS]
        cluster = Cluster.objects.create(account=account, name=f"c-{n:04}")
        site = ClusterSite.objects.create(
            cluster=cluster, location=location, cloudspace_id="cs", image_id=1
        )
        pool = MachinePool.objects.create(
            cluster=cluster, site=site, name="gpu", replicas=1, vcpus=8, memory_mib=32768,
            disk_gib=50, gpu_type=f"NVIDIA T{n % TYPES}", gpu_count=1,
        )  # fmt: skip
        machine = Machine.objects.create(
            pool=pool,
            index=0,
            name="gpu-0",
            phase=Machine.Phase.RUNNING,
            vm_id=10_000 + n,
        )
        VirtualMachine.objects.create(
            location=location, cloudspace_id="cs", vm_id=10_000 + n, name=machine.vm_name,
            status="RUNNING", vcpus=8, memory_mib=32768,
        )  # fmt: skip
        VgpuReservation.objects.create(
            location=location, name=machine.vgpu_name(0), vgpu_id=f"v-{n}",
            gpu_id=f"card-{n % TYPES}", state=VgpuReservation.State.ATTACHED,
            machine=machine, vm_id=machine.vm_id,
        )  # fmt: skip
    for n in range(ORPHANS):
        location = locations[n % LOCATIONS]
        VgpuReservation.objects.create(
            location=location, name=f"capvco-gone-m{n}-gpu-0", vgpu_id=f"o-{n}",
            gpu_id="card-0", state=VgpuReservation.State.RESERVED, owner_cluster="gone",
            owner_machine=f"m{n}",
        )  # fmt: skip
        ListedVgpu.objects.create(
            location=location, vgpu_id=f"o-{n}", name=f"capvco-gone-m{n}-gpu-0",
            gpu_id="card-0", first_seen_at=now - timedelta(days=3),
            orphaned_since=now - timedelta(days=2), orphan_confirmations=3,
        )  # fmt: skip
    leaks_record()
    user = User.objects.create_user("bench-admin")
    Membership.objects.create(account=account, user=user, role=Group.objects.get(name="admin"))
    return {"user": user, "cluster": Cluster.objects.order_by("pk").first()}


def history(now: datetime) -> dict[str, int]:
    """One real rollup, copied over a year of days and the hourly days kept (in SQL: at
    10,000 clusters the history is some 18 million rows)."""
    first = month_of(now)
    rollups_take(now=first)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    days = [first - n * DAY for n in range(YEAR, 0, -1)]
    days += [first + n * DAY for n in range((today - first).days)]
    hours = [today - n * HOUR for n in range(HOURLY_DAYS * 24, 0, -1)]
    hours += [today + n * HOUR for n in range(now.hour + 1)]
    sample = "bench_money_sample"
    with connection.cursor() as cursor:
        for model in (CostRollup, CapacityRollup):
            table = model._meta.db_table
            cursor.execute(
                f"CREATE TEMPORARY TABLE {sample}_{table} AS SELECT * FROM {table} "  # noqa: S608
                "WHERE step = %s AND start = %s",
                [Step.HOUR, first],
            )
            cursor.execute(
                f"DELETE FROM {table} WHERE step = %s AND start = %s",  # noqa: S608
                [Step.HOUR, first],
            )
    Rollup.objects.filter(step=Step.HOUR, start=first).delete()

    def copy(step: str, starts: list[datetime], samples: int) -> None:
        Rollup.objects.bulk_create(
            (Rollup(step=step, start=start, taken_at=start, samples=samples) for start in starts),
            batch_size=BATCH,
        )
        with connection.cursor() as cursor:
            for model in (CostRollup, CapacityRollup):
                table = model._meta.db_table
                kept = [
                    str(f.column)
                    for f in model._meta.concrete_fields
                    if f.name not in ("id", "step", "start", "samples")
                ]
                columns = ", ".join(kept)
                for chunk in range(0, len(starts), COPY_STARTS):
                    cursor.execute(
                        f"INSERT INTO {table} (step, start, samples, {columns}) "  # noqa: S608
                        f"SELECT %s, s.start, %s, {columns} FROM {sample}_{table} "
                        # In time order, as a pass writes them: a step's rows together.
                        "CROSS JOIN unnest(%s::timestamptz[]) AS s(start) ORDER BY s.start",
                        [step, samples, starts[chunk : chunk + COPY_STARTS]],
                    )

    copy(Step.DAY, days, 24)
    copy(Step.HOUR, hours, 1)
    for month in sorted({month_of(day) for day in days}):
        month_sum(month)  # as each day summed leaves it
    with connection.cursor() as cursor:
        for model in (CostRollup, CapacityRollup):
            cursor.execute(f"DROP TABLE {sample}_{model._meta.db_table}")
        # As a running database has its history: vacuumed (autovacuum would have: index-only
        # scans need not visit the rows), and written out, so that no autovacuum of the
        # millions of rows just copied, nor a checkpoint, runs beside the pages measured.
        cursor.execute("VACUUM (ANALYZE)")
        with suppress(DatabaseError):  # a role that may not: the disk is shared then
            cursor.execute("CHECKPOINT")
    return {
        "cost_rollups": CostRollup.objects.count(),
        "capacity_rollups": CapacityRollup.objects.count(),
        "day_markers": Rollup.objects.filter(step=Step.DAY).count(),
        "hour_markers": Rollup.objects.filter(step=Step.HOUR).count(),
    }


def measure(client: Client, path: str, runs: int) -> dict[str, float]:
    for _ in range(2):
        client.get(path)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    queries = page_queries(client, path)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
        "queries": queries,
    }


def run(clusters: int, day: int, runs: int) -> dict[str, Any]:
    real_now = datetime.now(UTC)
    now = month_of(real_now).replace(day=day, hour=12, minute=0)
    timezone.now = lambda: now  # type: ignore[assignment]
    started = time.perf_counter()
    ids = seed(clusters, now)
    counts = history(now)
    print(f"seeded in {time.perf_counter() - started:.0f} s: {counts}")
    client = Client()
    client.force_login(ids["user"])
    cluster = ids["cluster"]
    year = f"start={now - YEAR * DAY:%Y-%m-%d}&end={now + DAY:%Y-%m-%d}"  # 366 days
    location = cluster.sites.get().location_id
    pages = {
        "overview": "/",
        "cluster": f"/clusters/{cluster.pk}/",
        "overview cost CSV": "/money/cost-eur.csv",
        "leak ledger": "/leaks/",
        # The window picked (billing.windows): as many queries whatever its length.
        **{f"overview, {name}": f"/?{query}" for name, query in windows(year).items()},
        "location, 7 d by the hour": f"/locations/{location}/?window=7d&step=hour",
        "location, a year by the day": f"/locations/{location}/?{year}",
        "cluster, 7 d by the hour": f"/clusters/{cluster.pk}/?window=7d&step=hour",
        "cluster, a year by the day": f"/clusters/{cluster.pk}/?{year}",
        "overview cost CSV, a year by the day": f"/money/cost-eur.csv?{year}",
    }
    client.get("/")  # the apps, templates and URL conf loaded, as a web worker has them
    startup_objects_freeze()  # as the web worker does after its start (gunicorn_conf)
    results = {name: measure(client, path, runs) for name, path in pages.items()}
    print(f"{'page':<38} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
    for name, r in results.items():
        print(f"{name:<38} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['queries']:>8}")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    queries = {name: results[f"overview, {name}"]["queries"] for name in windows(year)}
    flat = {
        step: len({n for name, n in queries.items() if name.endswith(f"by the {step}")}) == 1
        for step in ("hour", "day")
    }
    print(f"the overview's queries the same whatever the window's length: {flat}")
    return {
        "clusters": clusters, "day": day, "history": counts, "pages": results,
        "window_queries_flat": flat,
    }  # fmt: skip


def windows(year: str) -> dict[str, str]:
    """The windows the overview is asked for: short and long, by the hour and by the day."""
    return {
        "24 h by the hour": "window=24h&step=hour",
        "7 d by the hour": "window=7d&step=hour",
        "24 h by the day": "window=24h",
        "30 d by the day": "window=30d",
        "a year by the day": year,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--day", type=int, default=28, help="the day of this month asked on")
    parser.add_argument("--runs", type=int, default=40, help="requests per page")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
        return 2
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        summary = run(args.clusters, args.day, args.runs)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(json.dumps(summary, separators=(",", ":")))
    slow = any(r["p95_ms"] > TARGET_MS for r in summary["pages"].values())
    return 1 if slow or not all(summary["window_queries_flat"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
