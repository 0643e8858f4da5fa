"""What observing the workload clusters' Kubernetes costs: list calls, SQL and time.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_kube_observe.py [--clusters 10] [--nodes 500] \\
        [--pods-per-node 20]

It starts its own fake Kubernetes API (one simulated cluster per cluster) and, per
cluster, a pool of ``--nodes`` running machines whose nodes have joined (half matched by
providerID, half by name), each with ``--pods-per-node`` pods, one of which asks a GPU.
It measures one observe of every cluster (the task's work, without Celery):

1. the first pass, which mirrors everything;
2. a second pass over unchanged clusters: expected one node and one pod listing per
   cluster (paged), and no SQL write but each cluster's stamp;
3. a pass after an annotation changed on one node of each cluster: the resourceVersions
   moved, so every row is compared, and still nothing but the stamps is written;
4. a pass after one node vanished and one pod changed phase in every cluster.

Prints a table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from cloud.models import Account, Location  # noqa: E402
from clusters.models import MAX_REPLICAS, Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from gpus import naming  # noqa: E402
from kube.client import kube_client  # noqa: E402
from kube.models import KubeNode, KubePod, MachineNode  # noqa: E402
from kube.nodes import provider_id  # noqa: E402
from kube.observe import cluster_kube_observe  # noqa: E402
from tests.kube_sim import KubeSimulator, node_object, pod_object  # noqa: E402

LOCATION = "bench-dc01-001"
SQL_WRITES = ("INSERT", "UPDATE", "DELETE")
CLUSTER_STAMP = 'UPDATE "kube_clusterobservation"'
SEED_CHUNK = 2000


@dataclass
class Measurement:
    seconds: float = 0.0
    list_calls: int = 0
    queries: int = 0
    sql_writes: int = 0
    stamp_writes: int = 0
    row_writes: int = 0
    by_operation: dict[str, int] = field(default_factory=dict)
    complete: bool = True


class QueryCounter:
    def __init__(self) -> None:
        self.queries = 0
        self.writes = 0
        self.stamps = 0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        self.queries += 1
        if sql.lstrip().upper().startswith(SQL_WRITES):
            self.writes += 1
            self.stamps += sql.startswith(CLUSTER_STAMP)
        return execute(sql, params, many, context)


@contextmanager
def measured(sim: KubeSimulator) -> Iterator[Measurement]:
    m = Measurement()
    sim.clear_calls()
    counter = QueryCounter()
    with connection.execute_wrapper(counter):
        started = time.perf_counter()
        yield m
        m.seconds = time.perf_counter() - started
    m.queries, m.sql_writes, m.stamp_writes = counter.queries, counter.writes, counter.stamps
    calls = sim.calls()
    m.list_calls = sum(1 for c in calls if str(c["operation"]).startswith("list "))
    m.by_operation = dict(Counter(str(c["operation"]) for c in calls))


def observe_all(sim: KubeSimulator) -> Measurement:
    with measured(sim) as m:
        for cluster in (
            Cluster.objects.exclude(kubeconfig="")
            .select_related("kube_observation", "gpu_addon_state")  # as kube.tasks reads it
            .order_by("name")
        ):
            with kube_client(cluster) as client:
                result = cluster_kube_observe(client=client, cluster=cluster)
            m.row_writes += result.writes
            m.complete = m.complete and result.complete
    return m


def seed(sim: KubeSimulator, clusters: int, nodes: int, pods_per_node: int) -> None:
    account = Account.objects.create(
        name="bench", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="bench", credential="x.y.z",
    )  # fmt: skip
    location = Location.objects.create(account=account, name=LOCATION)
    started = timezone.now() - timedelta(hours=1)
    for c in range(clusters):
        name = f"bench{c:02d}"
        access = sim.cluster(name)
        cluster = Cluster.objects.create(
            name=name, account=account, kubeconfig=access.kubeconfig_yaml
        )
        site = ClusterSite.objects.create(
            cluster=cluster, location=location, cloudspace_id=f"cs-{name}", image_id=1
        )
        # The machines are made below; a pool's replicas are bounded (MAX_REPLICAS).
        pool = MachinePool.objects.create(
            cluster=cluster, site=site, name="gpu", replicas=min(nodes, MAX_REPLICAS)
        )
        machines = Machine.objects.bulk_create(
            Machine(
                pool=pool,
                name=f"gpu-{i}",
                index=i,
                vm_id=(c + 1) * 100_000 + i,
                phase=Machine.Phase.RUNNING,
                vm_created_at=started,
                vm_started_at=started,
            )
            for i in range(nodes)
        )
        objects: list[dict[str, Any]] = []
        for i, machine in enumerate(machines):
            node = naming.vm_name(name, machine.name)
            assert machine.vm_id is not None
            by_id = provider_id(LOCATION, machine.vm_id) if i % 2 == 0 else ""
            objects.append(node_object(node, provider_id=by_id, gpus=1))
            objects.extend(
                pod_object(f"{node}-pod-{p}", namespace=f"team-{p % 4}", node=node,
                           gpus=1 if p == 0 else 0)
                for p in range(pods_per_node)
            )  # fmt: skip
        for start in range(0, len(objects), SEED_CHUNK):
            sim.put(name, *objects[start : start + SEED_CHUNK])


def touch(sim: KubeSimulator, clusters: int, *, vanish: bool) -> None:
    """Per cluster: an annotation on one node (nothing we mirror), or one node gone and
    one pod's phase changed."""
    for c in range(clusters):
        name = f"bench{c:02d}"
        cluster = Cluster.objects.get(name=name)
        with kube_client(cluster) as client:
            core = client._core  # the official client of that cluster
            node = naming.vm_name(name, "gpu-0")
            if vanish:
                core.delete_node(naming.vm_name(name, "gpu-1"))
                core.patch_namespaced_pod_status(
                    f"{node}-pod-0", "team-0", {"status": {"phase": "Succeeded"}}
                )
            else:
                core.patch_node(node, {"metadata": {"annotations": {"touched": "yes"}}})


def row(label: str, m: Measurement) -> str:
    return (
        f"{label:<38} {m.list_calls:>6} {m.queries:>8} {m.sql_writes:>7} {m.stamp_writes:>6} "
        f"{m.row_writes:>9} {m.seconds:>8.2f}"
    )


def run(sim: KubeSimulator, clusters: int, nodes: int, pods_per_node: int) -> dict[str, Any]:
    seeding = time.perf_counter()
    seed(sim, clusters, nodes, pods_per_node)
    seed_seconds = time.perf_counter() - seeding
    page = settings.KUBE_LIST_PAGE_SIZE
    pods = nodes * pods_per_node
    expected_calls = clusters * (math.ceil(nodes / page) + math.ceil(pods / page))

    first = observe_all(sim)
    unchanged = observe_all(sim)
    touch(sim, clusters, vanish=False)
    compared = observe_all(sim)
    touch(sim, clusters, vanish=True)
    changed = observe_all(sim)

    counts = {
        "nodes": KubeNode.objects.count(),
        "pods": KubePod.objects.count(),
        "owned_nodes": KubeNode.objects.filter(machine__isnull=False).count(),
        "machines_flagged": MachineNode.objects.filter(missing=True).count(),
    }
    checks = {
        "first_complete": first.complete and counts["owned_nodes"] == counts["nodes"],
        "list_calls_per_pass": unchanged.list_calls == expected_calls,
        "unchanged_writes_only_stamps": unchanged.sql_writes == clusters == unchanged.stamp_writes,
        "compared_writes_only_stamps": compared.sql_writes == clusters == compared.stamp_writes,
        "vanished_node_removed": counts["nodes"] == clusters * (nodes - 1),
    }
    print(
        f"{clusters} clusters x {nodes} nodes x {pods_per_node} pods per node "
        f"({clusters * pods} pods), pages of {page}; seeded in {seed_seconds:.1f} s\n"
    )
    print(f"{'pass':<38} {'lists':>6} {'queries':>8} {'writes':>7} {'stamps':>6} "
          f"{'row wr.':>9} {'seconds':>8}")  # fmt: skip
    print(row("1. first (mirror everything)", first))
    print(row("2. unchanged (resourceVersion equal)", unchanged))
    print(row("3. annotation changed (all compared)", compared))
    print(row("4. a node gone, a pod changed each", changed))
    print(f"\nexpected list calls per pass: {expected_calls}; rows: {counts}")
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "pods_per_node": pods_per_node,
        "page_size": page,
        "expected_list_calls": expected_calls,
        "first": asdict(first),
        "unchanged": asdict(unchanged),
        "compared": asdict(compared),
        "changed": asdict(changed),
        "rows": counts,
        "checks": checks,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=500, help="nodes (machines) per cluster")
    parser.add_argument("--pods-per-node", type=int, default=20)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
        return 2
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        with KubeSimulator() as sim:
            summary = run(sim, args.clusters, args.nodes, args.pods_per_node)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
    print(json.dumps(summary, separators=(",", ":")))
    return 0 if all(summary["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
