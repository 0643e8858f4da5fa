"""What the money pass costs (billing.tasks.billing_pass): the hour's rollup, the leak
ledger and the idle GPU spells, over a large fleet; SQL queries, rows written and time.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_rollup.py [--reservations 100000]

The world is bench_dashboard's: 10 locations, 50 clusters of 2 pools of 100 running
machines (10,000 machines, each with its VM listed and one vGPU attached), 200 orphans,
50 reservations not named by us, released history making up the rest of
``--reservations``, a node per machine with 10 pods each (half asking for a GPU). It
measures, each on its own:

1. the hour's sample (``rollups_take``): every pool's, namespace's and location's cost
   and the capacity per location and type;
2. the same pass again within the hour: it must write nothing;
3. the leak ledger (``leaks_record``: 250 leaks) and the idle spells (``idle_record``:
   one GPU node in ten has no pod asking for its GPU, 1,000 spells), first and again
   (again: no write);
4. summing a day of 24 sampled hours into day rows (the hours are copies of the first
   sample, made in SQL so the benchmark does not take 24 samples).

Wall times depend on what else runs on the machine (the load average is printed); the
query and row counts do not. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.idle import idle_record  # noqa: E402
from billing.leaks import leaks_record  # noqa: E402
from billing.models import (  # noqa: E402
    CapacityRollup,
    CostRollup,
    IdleSpell,
    Leak,
    Rollup,
    Step,
)
from billing.rollups import day_of, hour_of, rollups_take  # noqa: E402
from clusters.models import Cluster, Machine  # noqa: E402
from gpus.models import VgpuReservation  # noqa: E402
from kube.models import KubeNode, KubePod  # noqa: E402
from tests.bench.bench_dashboard import seed  # noqa: E402
from tests.bench.support import (  # noqa: E402
    is_sql_write,
    postgresql_missing,
    throwaway_database,
)
from tests.factories import kube_observed_as  # noqa: E402


def measure(name: str, step: Callable[[], Any]) -> dict[str, Any]:
    with CaptureQueriesContext(connection) as queries:
        start = time.perf_counter()
        step()
        seconds = time.perf_counter() - start
    sql = [q["sql"] for q in queries.captured_queries]
    writes = [q for q in sql if is_sql_write(q)]
    return {"step": name, "seconds": round(seconds, 3), "queries": len(sql),
            "write_statements": len(writes)}  # fmt: skip


def copy_hours(hour: Any, hours: int) -> None:
    """Make `hours` - 1 more sampled hours of the day from the sample of `hour`."""
    for n in range(1, hours):
        shift = f"interval '{n} hours'"
        with connection.cursor() as cursor:
            for model in (CostRollup, CapacityRollup):
                table = model._meta.db_table
                fields = model._meta.concrete_fields
                kept = [str(f.column) for f in fields if f.name not in ("id", "start")]
                cursor.execute(
                    f"INSERT INTO {table} (start, {', '.join(kept)}) "  # noqa: S608
                    f"SELECT start + {shift}, {', '.join(kept)} FROM {table} "
                    "WHERE step = 'hour' AND start = %s",
                    [hour],
                )
        Rollup.objects.create(step=Step.HOUR, start=hour + timedelta(hours=n), taken_at=hour)


def run(reservations: int) -> dict[str, Any]:
    started = time.perf_counter()
    seed(reservations)
    # The kube observation was complete: idle spells may open. One GPU node in ten has
    # pods that ask for no GPU: its GPU is idle.
    for cluster in Cluster.objects.all():
        kube_observed_as(cluster, complete=True)
    tenth = list(Machine.objects.order_by("pk").values_list("pk", flat=True))[::10]
    idle = KubeNode.objects.filter(machine_id__in=tenth).values_list("name", flat=True)
    KubePod.objects.filter(node_name__in=list(idle)).update(gpu_requests=0)
    print(f"seeded {Machine.objects.count():,} machines, {VgpuReservation.objects.count():,} "
          f"reservations in {time.perf_counter() - started:.0f} s")  # fmt: skip
    day = day_of(timezone.now()) - timedelta(days=1)
    hour = hour_of(day)
    steps = [
        measure("hour sample", lambda: rollups_take(now=hour + timedelta(minutes=5))),
        measure("hour sample again", lambda: rollups_take(now=hour + timedelta(minutes=35))),
        measure("leak ledger", leaks_record),
        measure("leak ledger again", leaks_record),
        measure("idle spells", lambda: idle_record(now=hour)),
        measure("idle spells again", lambda: idle_record(now=hour + timedelta(minutes=5))),
    ]
    rows = {
        "cost rows per hour": CostRollup.objects.filter(step=Step.HOUR).count(),
        "capacity rows per hour": CapacityRollup.objects.filter(step=Step.HOUR).count(),
        "idle spells opened": IdleSpell.objects.count(),
        "leaks opened": Leak.objects.count(),
    }
    # The day's 24 hours, and the next day's first (its sample is the step above): the step
    # below sums the day alone.
    copy_hours(hour, 25)
    steps.append(
        measure(
            "sum a day of 24 hours", lambda: rollups_take(now=day + timedelta(days=1, minutes=5))
        )
    )
    rows["cost rows per day"] = CostRollup.objects.filter(step=Step.DAY).count()
    load = os.getloadavg()[0]
    print(f"\nload average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")
    print(f"{'step':26} {'seconds':>8} {'queries':>8} {'writes':>8}")
    for s in steps:
        print(f"{s['step']:26} {s['seconds']:8.3f} {s['queries']:8d} {s['write_statements']:8d}")
    for name, count in rows.items():
        print(f"{name:26} {count:8,d}")
    again = [s for s in steps if s["step"].endswith("again")]
    assert all(s["write_statements"] == 0 for s in again), again
    return {"machines": Machine.objects.count(), "reservations": reservations,
            "load_average": load, "steps": steps, "rows": rows}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reservations", type=int, default=100_000)
    args = parser.parse_args()
    if postgresql_missing():
        return 2
    with throwaway_database():
        summary = run(args.reservations)
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
