"""Server time of the dashboard's pages over a large history: p50 and p95 per page.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_dashboard.py [--reservations 100000] [--runs 40]

The world: 10 locations with 8 GPU cards each (two types), 50 clusters of 2 pools of 100
running machines (10,000 machines, each with its VM listed and one vGPU attached), released
history making up the rest of ``--reservations`` (90,000 of the 100,000 by default), 200
orphans named by us, 50 reservations not named by us, and as many audit events as
reservations; in Kubernetes a node per machine (one in 50 advertising no GPU), 100 nodes no
machine owns, 10 pods per node (half of them holding a GPU), and one machine in 100 whose
node never joined; and this hour sampled by the money pass (billing.rollups), whose rates
the money section reads. Each page is asked for ``--runs`` times through Django's test
client (the whole request: middleware, session, queries, templates; no network) by a
superuser, then by an admin of the account, whose rows are chosen by role
(capvco_web.permissions.visible).

Target: p95 at most 150 ms for every page. Wall times depend on what else runs on the
machine (the load average is printed); "CPU ms" is this process's own CPU time per request
(Python: middleware, views, templates), the database's is not in it. Prints a table, then
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
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

from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.rollups import rollups_take  # noqa: E402
from capvco_web.models import AuditEvent  # noqa: E402
from cloud.models import Account, Location, Membership, VirtualMachine  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from gpus.models import GpuProfile, ListedVgpu, VgpuReservation  # noqa: E402
from kube.models import KubeNode, KubePod, MachineNode  # noqa: E402
from tests.bench.support import page_queries  # noqa: E402

LOCATIONS = 10
CLUSTERS = 50
POOLS_PER_CLUSTER = 2
MACHINES_PER_POOL = 100
CARDS_PER_LOCATION = 8
ORPHANS = 200
NOT_OURS = 50
PODS_PER_NODE = 10
UNOWNED_NODES = 100
TARGET_MS = 150.0
State = VgpuReservation.State
BATCH = 5000


def seed(reservations: int) -> dict[str, Any]:
    """The world above; answers what the pages are asked about."""
    now = timezone.now()
    account = Account.objects.create(
        name="bench", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="bench", credential="x.y.z",
    )  # fmt: skip
    locations = Location.objects.bulk_create(
        Location(
            account=account,
            name=f"bench{i:02d}-dc01-001",
            currency="EUR",
            vgu_price=Decimal("300"),
            observation_complete=True,
            observation_started_at=now,
            last_complete_observation_at=now,
        )
        for i in range(LOCATIONS)
    )
    GpuProfile.objects.bulk_create(
        GpuProfile(
            location=location,
            profile_id=f"card-{location.pk}-{c}",
            vendor="NVIDIA",
            model=f"{'A100' if c % 2 else 'T4'} (0000:{c:02x}:00.0)",
            available_instances=3,
        )
        for location in locations
        for c in range(CARDS_PER_LOCATION)
    )
    clusters = Cluster.objects.bulk_create(
        Cluster(name=f"c{i:02d}", account=account) for i in range(CLUSTERS)
    )
    sites = ClusterSite.objects.bulk_create(
        ClusterSite(
            cluster=cluster,
            location=locations[i % LOCATIONS],
            cloudspace_id=f"cs-{cluster.name}",
            image_id=1,
        )
        for i, cluster in enumerate(clusters)
    )
    pools = MachinePool.objects.bulk_create(
        MachinePool(
            cluster=site.cluster,
            site=site,
            name=f"p{p}",
            replicas=MACHINES_PER_POOL,
            gpu_type="NVIDIA A100",
            gpu_count=1,
            next_index=MACHINES_PER_POOL,
        )
        for site in sites
        for p in range(POOLS_PER_CLUSTER)
    )
    site_of = {site.pk: site for site in sites}
    vm_id = 100_000
    machines: list[Machine] = []
    vms: list[VirtualMachine] = []
    for pool in pools:
        site = site_of[pool.site_id]
        for index in range(MACHINES_PER_POOL):
            vm_id += 1
            name = f"{pool.name}-{index}"
            machines.append(
                Machine(
                    pool=pool, name=name, index=index, vm_id=vm_id, phase=Machine.Phase.RUNNING,
                    vm_created_at=now - timedelta(days=1),
                )
            )  # fmt: skip
            vms.append(
                VirtualMachine(
                    location_id=site.location_id, cloudspace_id=site.cloudspace_id,
                    vm_id=vm_id, name=f"capvco-{site.cluster.name}-{name}", status="RUNNING",
                )
            )  # fmt: skip
    Machine.objects.bulk_create(machines, batch_size=BATCH)
    VirtualMachine.objects.bulk_create(vms, batch_size=BATCH)
    pool_of = {pool.pk: pool for pool in pools}
    rows: list[VgpuReservation] = []
    seen: dict[str, dict[str, object]] = {}  # what the listings say, by vGPU id
    for m in machines:
        pool = pool_of[m.pool_id]
        site = site_of[pool.site_id]
        rows.append(
            VgpuReservation(
                location_id=site.location_id, name=f"capvco-{site.cluster.name}-{m.name}-gpu-0",
                vgpu_id=f"live-{m.pk}", gpu_id=f"card-{site.location_id}-1",
                state=State.ATTACHED, vm_id=m.vm_id, machine=m,
                owner_cluster=site.cluster.name, owner_machine=m.name, owner_index=0,
            )
        )  # fmt: skip
        seen[f"live-{m.pk}"] = {"first_seen_at": now - timedelta(days=1)}
    for i in range(ORPHANS):
        location = locations[i % LOCATIONS]
        rows.append(
            VgpuReservation(
                location=location, name=f"capvco-c{i % CLUSTERS:02d}-p0-{1000 + i}-gpu-0",
                vgpu_id=f"orphan-{i}", gpu_id=f"card-{location.pk}-1", state=State.RESERVED,
                owner_cluster=f"c{i % CLUSTERS:02d}", owner_machine=f"p0-{1000 + i}",
                owner_index=0,
            )
        )  # fmt: skip
        since = now - timedelta(hours=i % 48)
        seen[f"orphan-{i}"] = {
            "unassigned_since": since, "orphaned_since": since, "orphan_confirmations": 3,
        }  # fmt: skip
    for i in range(NOT_OURS):
        location = locations[i % LOCATIONS]
        rows.append(
            VgpuReservation(
                location=location, name=f"team-x-vgpu-{i}", vgpu_id=f"foreign-{i}",
                gpu_id=f"card-{location.pk}-0", state=State.RESERVED,
            )
        )  # fmt: skip
        since = now - timedelta(days=2)
        seen[f"foreign-{i}"] = {"unassigned_since": since, "orphaned_since": since}
    history = max(0, reservations - len(rows))
    for i in range(history):
        location = locations[i % LOCATIONS]
        cluster = f"c{i % CLUSTERS:02d}"
        rows.append(
            VgpuReservation(
                location=location, name=f"capvco-{cluster}-p{i % 2}-{200 + i // 100}-gpu-0",
                vgpu_id=f"old-{i}", gpu_id=f"card-{location.pk}-1", state=State.RELEASED,
                owner_cluster=cluster, owner_machine=f"p{i % 2}-{200 + i // 100}",
                owner_index=0, released_at=now - timedelta(minutes=i),
            )
        )  # fmt: skip
    VgpuReservation.objects.bulk_create(rows, batch_size=BATCH)
    ListedVgpu.objects.bulk_create(
        (
            ListedVgpu(
                location_id=row.location_id, vgpu_id=row.vgpu_id, name=row.name,
                gpu_id=row.gpu_id, vm_id=row.vm_id,
                **{"first_seen_at": now - timedelta(days=2), **seen[row.vgpu_id]},
            )
            for row in rows
            if row.vgpu_id in seen
        ),
        batch_size=BATCH,
    )  # fmt: skip
    # History is older than what is billed now: created_at follows the release.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE gpus_vgpureservation SET created_at = released_at - interval '30 days' "
            "WHERE state = 'released'"
        )
    AuditEvent.objects.bulk_create(
        (
            AuditEvent(
                account=account, actor_name="ops", action="vgpu.release_requested",
                object_type="gpus.VgpuReservation", object_id=str(i),
                object_repr=f"capvco-c{i % CLUSTERS:02d}-p0-{i}-gpu-0", reason="bench",
            )
            for i in range(reservations)
        ),
        batch_size=BATCH,
    )  # fmt: skip
    seed_kube(machines, pools, now)
    rollups_take(now=now)  # this hour sampled, as the money pass has it in a running system
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"account": account.pk, "location": locations[3].pk, "cluster": clusters[7].pk}


def seed_kube(machines: list[Machine], pools: list[MachinePool], now: Any) -> None:
    """A node per machine, unowned nodes, pods on each node, machines with no node."""
    cluster_of = {pool.pk: pool.cluster_id for pool in pools}
    labels = {"capvco.io/gpu-type": "nvidia-a100", "capvco.io/gpu-count": "1"}
    nodes = [
        KubeNode(
            cluster_id=cluster_of[m.pool_id], name=f"capvco-{m.name}-{m.pk}", uid=f"n-{m.pk}",
            labels=labels, gpu_capacity=1, gpu_allocatable=0 if i % 50 == 0 else 1,
            gpus_missing=i % 50 == 0, ready=True, machine=m, first_seen_at=now,
            updated_at=now,
        )
        for i, m in enumerate(machines)
    ]  # fmt: skip
    nodes += [
        KubeNode(
            cluster_id=pools[i % len(pools)].cluster_id, name=f"stray-{i}", uid=f"s-{i}",
            ready=True, unowned_since=now, first_seen_at=now, updated_at=now,
        )
        for i in range(UNOWNED_NODES)
    ]  # fmt: skip
    KubeNode.objects.bulk_create(nodes, batch_size=BATCH)
    KubePod.objects.bulk_create(
        (
            KubePod(
                cluster_id=node.cluster_id, uid=f"p-{node.uid}-{p}", namespace="ml",
                name=f"{node.name}-pod-{p}", node_name=node.name, phase=KubePod.Phase.RUNNING,
                gpu_requests=p % 2, first_seen_at=now, updated_at=now,
            )
            for node in nodes
            for p in range(PODS_PER_NODE)
        ),
        batch_size=BATCH,
    )  # fmt: skip
    MachineNode.objects.bulk_create(
        [MachineNode(machine=m, vm_id=m.vm_id, missing=True) for m in machines[::100]]
    )


def pages(ids: dict[str, Any], client: Client) -> dict[str, str]:
    # The tenth page of a search, reached by its next links.
    search = "/reservations/?sort=name&q=c07-p1"
    cursor = ""
    for _ in range(9):
        html = client.get(f"{search}&after={cursor}" if cursor else search).content.decode()
        cursor = re.findall(r"after=([\w-]+)", html)[-1]
    return {
        "overview /": "/",
        "reservations, unfiltered": "/reservations/",
        "reservations, filtered (location, state)": (
            f"/reservations/?location={ids['location']}&state=attached"
        ),
        "reservations, filtered (orphaned)": "/reservations/?orphaned=true",
        "reservations, filtered (not named by us)": "/reservations/?not_ours=true",
        "reservations, filtered (GPU type)": "/reservations/?type=NVIDIA+A100",
        "reservations, filtered (GPU type, none held)": "/reservations/?type=NVIDIA+T4",
        "reservations, searched (rare)": "/reservations/?q=c07-p1-250",
        "reservations, searched (common)": "/reservations/?q=gpu-0",
        "reservations, last page": "/reservations/?last=1",
        "reservations, last page by name": "/reservations/?sort=name&last=1",
        "reservations, 10th page of a search": f"{search}&after={cursor}",
        "clusters": "/clusters/",
        "cluster /clusters/<id>/": f"/clusters/{ids['cluster']}/",
        "cluster fragment (poll)": f"/clusters/{ids['cluster']}/#fragment",
        "nodes": "/nodes/",
        "nodes of a cluster, last page": "/nodes/?cluster__name=c07&last=1",
        "nodes, flagged (no GPU advertised)": "/nodes/?flag=gpus-missing",
        "machines with no node": "/nodes/?flag=node-missing",
        "audit log": "/audit/",
    }


def measure(client: Client, path: str, runs: int) -> dict[str, float]:
    headers: dict[str, str] = {}
    if path.endswith("#fragment"):
        path = path.removesuffix("#fragment")
        headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "cluster-body"}
    for _ in range(3):  # warm: the first asks read cold pages
        client.get(path, **headers)  # type: ignore[arg-type]
    times = []
    cpu = []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(path, **headers)  # type: ignore[arg-type]
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    queries = page_queries(client, path, **headers)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
        "max_ms": round(times[-1], 1),
        "python_cpu_p50_ms": round(statistics.median(cpu), 1),
        "queries": queries,
    }


def run(reservations: int, runs: int) -> dict[str, Any]:
    started = time.perf_counter()
    ids = seed(reservations)
    seeded = time.perf_counter() - started
    counts = {
        "reservations": VgpuReservation.objects.count(),
        "released": VgpuReservation.objects.filter(state=State.RELEASED).count(),
        "machines": Machine.objects.count(),
        "nodes": KubeNode.objects.count(),
        "pods": KubePod.objects.count(),
        "locations": Location.objects.count(),
        "audit_events": AuditEvent.objects.count(),
    }
    print(f"seeded in {seeded:.0f} s: {counts}")
    superuser = User.objects.create_superuser("bench", password="bench-pass-1")
    member = User.objects.create_user("bench-member", password="bench-pass-1")
    Membership.objects.create(
        user=member, account_id=ids["account"], role=Group.objects.get(name="admin")
    )
    by_user: dict[str, dict[str, dict[str, float]]] = {}
    for who, user in [("superuser", superuser), ("account admin", member)]:
        client = Client()
        client.force_login(user)
        by_user[who] = {
            name: measure(client, path, runs) for name, path in pages(ids, client).items()
        }
    load = os.getloadavg()[0]
    print(f"\nload average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")
    for who, results in by_user.items():
        print(f"\nas {who}")
        print(f"{'page':45} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'CPU ms':>7} {'queries':>7}")
        for name, r in results.items():
            flag = "" if r["p95_ms"] <= TARGET_MS else "  over target"
            print(
                f"{name:45} {r['p50_ms']:7.1f} {r['p95_ms']:7.1f} {r['max_ms']:7.1f} "
                f"{r['python_cpu_p50_ms']:7.1f} {r['queries']:7d}{flag}"
            )
    return {
        "world": counts, "runs": runs, "target_p95_ms": TARGET_MS, "load_average": load,
        "pages": by_user,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reservations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=40, help="requests per page")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
        return 2
    # No setup_test_environment(): its template instrumentation (contexts kept for the
    # test client) is not what a server does, and would be counted.
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        summary = run(args.reservations, args.runs)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(json.dumps(summary, separators=(",", ":")))
    over = [
        name
        for results in summary["pages"].values()
        for name, r in results.items()
        if r["p95_ms"] > TARGET_MS
    ]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
