"""The pages that show money over time, with a year of history: p50 and p95 server time
and SQL queries per page, and whether the queries grow with the history.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_money_pages.py [--clusters 1000] [--runs 40]

The world: 10 locations with 5 GPU types each (a card per type), ``--clusters`` clusters of
one pool of 2 running machines with a vGPU attached and a node each (one node in four
with no pod asking for its GPU: idle), 10 orphaned vGPUs. One hour's rollup is taken by
the money pass itself (billing.rollups), then copied in SQL into the history the
retention keeps of a year of hourly samples: hour rows for the last
``COST_HOURLY_HISTORY_DAYS`` (60) days and day rows for the 365 days before today.
Each page is asked for ``--runs`` times through Django's test client (the whole request;
no network) by a superuser and by an admin of the account; then the history is cut to
its last 7 days and the query counts taken again: they must not differ.

Target: p95 at most 150 ms. Wall times depend on what else runs on the machine (the load
average is printed). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.models import CapacityRollup, CostRollup, Rollup, Step  # noqa: E402
from billing.rollups import (  # noqa: E402
    CAPACITY_SUMS,
    COST_SUMS,
    day_of,
    hour_of,
    rollups_take,
)
from cloud.models import Account, Location, Membership, VirtualMachine  # noqa: E402
from clusters.models import (  # noqa: E402
    Cluster,
    ClusterSite,
    KubeNode,
    KubePod,
    Machine,
    MachinePool,
)
from gpus.models import GpuProfile, ListedVgpu, VgpuReservation  # noqa: E402
from tests.bench.bench_dashboard import measure  # noqa: E402

LOCATIONS = 10
TYPES = ("A100", "H100", "L40S", "T4", "A10")
MACHINES_PER_CLUSTER = 2
ORPHANS = 10
TARGET_MS = 150.0
BATCH = 5000
State = VgpuReservation.State


def seed(clusters: int) -> dict[str, Any]:
    now = timezone.now()
    account = Account.objects.create(
        name="bench", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="bench", credential="x.y.z",
    )  # fmt: skip
    locations = Location.objects.bulk_create(
        Location(
            account=account, name=f"bench{i:02d}-dc01-001", currency="EUR",
            vgu_price=Decimal("730"), prices={"vcu": 7.3, "mu": 3.65, "vgu": 730},
            observation_complete=True, observation_started_at=now,
            last_complete_observation_at=now,
        )
        for i in range(LOCATIONS)
    )  # fmt: skip
    GpuProfile.objects.bulk_create(
        GpuProfile(location=location, profile_id=f"card-{location.pk}-{t}", vendor="NVIDIA",
                   model=f"{gpu} (0000:{t:02x}:00.0)", available_instances=4)
        for location in locations
        for t, gpu in enumerate(TYPES)
    )  # fmt: skip
    made = Cluster.objects.bulk_create(
        Cluster(name=f"c{i:04d}", account=account, kube_observation_complete=True)
        for i in range(clusters)
    )
    sites = ClusterSite.objects.bulk_create(
        ClusterSite(cluster=cluster, location=locations[i % LOCATIONS],
                    cloudspace_id=f"cs-{cluster.name}", image_id=1)
        for i, cluster in enumerate(made)
    )  # fmt: skip
    pools = MachinePool.objects.bulk_create(
        MachinePool(cluster=site.cluster, site=site, name="gpu", replicas=MACHINES_PER_CLUSTER,
                    gpu_type=f"NVIDIA {TYPES[i % len(TYPES)]}", gpu_count=1, vcpus=8,
                    memory_mib=32768, next_index=MACHINES_PER_CLUSTER)
        for i, site in enumerate(sites)
    )  # fmt: skip
    machines, vms = [], []
    for n, pool in enumerate(pools):
        for index in range(MACHINES_PER_CLUSTER):
            vm_id = 100_000 + n * MACHINES_PER_CLUSTER + index
            machines.append(Machine(pool=pool, name=f"gpu-{index}", index=index, vm_id=vm_id,
                                    phase=Machine.Phase.RUNNING))  # fmt: skip
            vms.append(VirtualMachine(location_id=pool.site.location_id,
                                      cloudspace_id=pool.site.cloudspace_id, vm_id=vm_id,
                                      name=f"capvco-{pool.cluster.name}-gpu-{index}",
                                      status="RUNNING", vcpus=8, memory_mib=32768))  # fmt: skip
    Machine.objects.bulk_create(machines, batch_size=BATCH)
    VirtualMachine.objects.bulk_create(vms, batch_size=BATCH)
    rows = []
    for m in machines:
        site = m.pool.site
        card = f"card-{site.location_id}-{TYPES.index(m.pool.gpu_type.split()[1])}"
        rows.append(VgpuReservation(
            location_id=site.location_id, name=f"capvco-{site.cluster.name}-{m.name}-gpu-0",
            vgpu_id=f"live-{m.vm_id}", gpu_id=card, state=State.ATTACHED, vm_id=m.vm_id,
            machine=m, owner_cluster=site.cluster.name, owner_machine=m.name, owner_index=0,
        ))  # fmt: skip
    for i in range(ORPHANS):
        rows.append(VgpuReservation(
            location=locations[i], name=f"capvco-c{i:04d}-gone-{i}-gpu-0", vgpu_id=f"orphan-{i}",
            gpu_id=f"card-{locations[i].pk}-0", state=State.RESERVED,
            owner_cluster=f"c{i:04d}", owner_machine=f"gone-{i}", owner_index=0,
        ))  # fmt: skip
    VgpuReservation.objects.bulk_create(rows, batch_size=BATCH)
    ListedVgpu.objects.bulk_create(
        (ListedVgpu(location_id=r.location_id, vgpu_id=str(r.vgpu_id), name=r.name, gpu_id=r.gpu_id,
                    vm_id=r.vm_id, first_seen_at=now - timedelta(days=400),
                    orphaned_since=None if r.machine_id else now - timedelta(days=3),
                    orphan_confirmations=0 if r.machine_id else 3)
         for r in rows),
        batch_size=BATCH,
    )  # fmt: skip
    nodes = KubeNode.objects.bulk_create(
        (KubeNode(cluster_id=m.pool.cluster_id, name=f"n-{m.vm_id}", uid=f"n-{m.vm_id}",
                  gpu_capacity=1, gpu_allocatable=1, ready=True, machine=m,
                  labels={"capvco.io/gpu-type": m.pool.gpu_type.lower().replace(" ", "-")},
                  first_seen_at=now, updated_at=now)
         for m in machines),
        batch_size=BATCH,
    )  # fmt: skip
    KubePod.objects.bulk_create(
        (KubePod(cluster_id=node.cluster_id, uid=f"p-{node.uid}", namespace=f"team-{i % 7}",
                 name=f"job-{node.uid}", node_name=node.name, phase=KubePod.Phase.RUNNING,
                 gpu_requests=0 if i % 4 == 0 else 1, first_seen_at=now, updated_at=now)
         for i, node in enumerate(nodes)),
        batch_size=BATCH,
    )  # fmt: skip
    history(now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"account": account.pk, "cluster": made[len(made) // 2].pk}


def history(now: Any) -> None:
    """One real sample, copied into 60 days of hours and 365 days of day rows."""
    last_hour = hour_of(now) - timedelta(hours=1)
    rollups_take(now=last_hour)
    hours = settings.COST_HOURLY_HISTORY_DAYS * 24
    days = 365
    with connection.cursor() as cursor:
        for model in (CostRollup, CapacityRollup):
            table = model._meta.db_table
            columns = [str(f.column) for f in model._meta.concrete_fields
                       if f.name not in ("id", "start", "step", "samples")]  # fmt: skip
            sums = set(COST_SUMS) | set(CAPACITY_SUMS)
            copied = ", ".join(columns)
            per_day = ", ".join(f"{c} * 24" if c in sums else c for c in columns)
            cursor.execute(
                f"INSERT INTO {table} (step, start, samples, {copied}) "  # noqa: S608
                f"SELECT 'hour', r.start - n * interval '1 hour', 1, {copied} "
                f"FROM {table} r, generate_series(1, %s) n WHERE r.step = 'hour'",
                [hours - 1],
            )
            cursor.execute(
                f"INSERT INTO {table} (step, start, samples, {per_day.replace(' * 24', '')}) "  # noqa: S608
                f"SELECT 'day', %s - n * interval '1 day', 24, {per_day} "
                f"FROM {table} r, generate_series(1, %s) n WHERE r.step = 'hour' AND r.start = %s",
                [day_of(now), days, last_hour],
            )
    Rollup.objects.bulk_create(
        [Rollup(step=Step.HOUR, start=last_hour - timedelta(hours=n), taken_at=now)
         for n in range(1, hours)]
        + [Rollup(step=Step.DAY, start=day_of(now) - timedelta(days=n), taken_at=now)
           for n in range(1, days + 1)],
        batch_size=BATCH,
    )  # fmt: skip


def pages(ids: dict[str, Any]) -> dict[str, str]:
    return {"overview /": "/", "cluster /clusters/<id>/": f"/clusters/{ids['cluster']}/"}


def run(clusters: int, runs: int) -> dict[str, Any]:
    started = time.perf_counter()
    ids = seed(clusters)
    counts = {
        "clusters": Cluster.objects.count(),
        "machines": Machine.objects.count(),
        "hour cost rows": CostRollup.objects.filter(step=Step.HOUR).count(),
        "day cost rows": CostRollup.objects.filter(step=Step.DAY).count(),
        "capacity rows": CapacityRollup.objects.count(),
    }
    print(f"seeded in {time.perf_counter() - started:.0f} s: {counts}")
    superuser = User.objects.create_superuser("bench", password="bench-pass-1")
    member = User.objects.create_user("bench-member", password="bench-pass-1")
    Membership.objects.create(
        user=member, account_id=ids["account"], role=Group.objects.get(name="admin")
    )
    by_user: dict[str, dict[str, dict[str, float]]] = {}
    clients = {}
    for who, user in [("superuser", superuser), ("account admin", member)]:
        clients[who] = client = Client()
        client.force_login(user)
        by_user[who] = {name: measure(client, path, runs) for name, path in pages(ids).items()}
    # The same pages over a week of history: the queries must be the same.
    week = timezone.now() - timedelta(days=7)
    CostRollup.objects.filter(start__lt=week).delete()
    CapacityRollup.objects.filter(start__lt=week).delete()
    Rollup.objects.filter(start__lt=week).delete()
    short = {name: measure(clients["superuser"], path, 3)["queries"]
             for name, path in pages(ids).items()}  # fmt: skip
    load = os.getloadavg()[0]
    print(f"\nload average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")
    for who, results in by_user.items():
        print(f"\nas {who}")
        print(
            f"{'page':30} {'p50 ms':>7} {'p95 ms':>7} {'CPU ms':>7} {'queries':>7} {'(a week)':>8}"
        )
        for name, r in results.items():
            flag = "" if r["p95_ms"] <= TARGET_MS else "  over target"
            figures = (r["p50_ms"], r["p95_ms"], r["python_cpu_p50_ms"])
            print(
                f"{name:30} {figures[0]:7.1f} {figures[1]:7.1f} {figures[2]:7.1f} "
                f"{r['queries']:7d} {short[name]:8d}{flag}"
            )
    grows = [name for name, n in short.items() if n != by_user["superuser"][name]["queries"]]
    return {
        "world": counts, "runs": runs, "load_average": load, "pages": by_user,
        "queries_with_a_week_of_history": short, "queries_grow_with_history": grows,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=40, help="requests per page")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
        return 2
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        summary = run(args.clusters, args.runs)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(json.dumps(summary, separators=(",", ":")))
    return 1 if summary["queries_grow_with_history"] else 0


if __name__ == "__main__":
    sys.exit(main())
