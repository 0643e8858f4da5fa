"""How long planning a cluster takes, and how many queries it makes, as it grows.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_plan.py [--machines 1000 10000] [--repeat 3]

For each size N it makes, straight in the database (no whitesky), one location with A100
cards for every machine (16 instances each, one card to spare, observed completely) and
one cluster with pools of 100 one-GPU machines (the most a pool may ask for), then
times ``cluster_plan`` in three states:

* ``scale-up``: the pool asks for N machines and has none (N create steps);
* ``pending``: N machine rows made, none provisioned yet (N provision steps);
* ``steady``: N machines running with their vGPU attached and their VM listed (no step).

Then, in the steady state, two passes of ``cluster_reconcile`` (the beat's pass of one
cluster), each timed once:

* ``pass-full``: the first, which plans in full (and records that the plan was empty);
* ``pass-unchanged``: the next ones, their inputs unchanged (best of ``--repeat``).

Prints one line per state and size (best of ``--repeat`` runs; the queries, model
instances loaded and the cyclic garbage collector's milliseconds of one run), then one
JSON line with every figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.db.models.signals import post_init  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from cloud.models import Account, Location, VirtualMachine  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from clusters.plan import cluster_plan  # noqa: E402
from clusters.reconcile import cluster_reconcile  # noqa: E402
from gpus.models import GpuProfile, VgpuReservation  # noqa: E402

INSTANCES_PER_CARD = 16
CLOUDSPACE = "cs-bench"


POOL_SIZE = 100  # the most replicas a pool may ask for


def world_make(n: int) -> list[MachinePool]:
    """An account, a location with room for n one-GPU machines, and empty pools for them."""
    (account,) = Account.objects.bulk_create(
        [Account(name="bench", api_url="https://bench.invalid", customer_id="bench")]
    )
    began = timezone.now()
    location = Location.objects.create(
        account=account,
        name="bench-dc01-001",
        observation_complete=True,
        observation_started_at=began,
        last_complete_observation_at=began,
    )
    GpuProfile.objects.bulk_create(
        GpuProfile(
            location=location,
            profile_id=f"gpu-{card:05d}",
            vendor="NVIDIA",
            model=f"A100 0000:{card // 256:02x}:{card % 256:02x}.0",
            available_instances=INSTANCES_PER_CARD,
        )
        for card in range(math.ceil(n / INSTANCES_PER_CARD) + 1)
    )
    cluster = Cluster.objects.create(name="bench", account=account)
    site = ClusterSite.objects.create(
        cluster=cluster, location=location, cloudspace_id=CLOUDSPACE, image_id=1
    )
    return MachinePool.objects.bulk_create(
        MachinePool(
            cluster=cluster,
            site=site,
            name=f"gpu{p:03d}",
            replicas=min(POOL_SIZE, n - p * POOL_SIZE),
            gpu_type="NVIDIA A100",
            gpu_count=1,
        )
        for p in range(math.ceil(n / POOL_SIZE))
    )


def machines_make(pools: list[MachinePool]) -> None:
    Machine.objects.bulk_create(
        (
            Machine(pool=pool, name=f"{pool.name}-{i}", index=i)
            for pool in pools
            for i in range(pool.replicas)
        ),
        batch_size=2000,
    )
    for pool in pools:
        MachinePool.objects.filter(pk=pool.pk).update(next_index=pool.replicas)


def machines_run(location: Location) -> None:
    """Every machine running, its VM listed, its vGPU attached (and listed before)."""
    now = timezone.now()
    machines = list(Machine.objects.select_related("pool").order_by("pk"))
    for seq, machine in enumerate(machines):
        machine.vm_id = 10_000 + seq
        machine.phase = Machine.Phase.RUNNING
        machine.vm_created_at = machine.vm_started_at = now
    Machine.objects.bulk_update(
        machines, ["vm_id", "phase", "vm_created_at", "vm_started_at"], batch_size=2000
    )
    VirtualMachine.objects.bulk_create(
        (
            VirtualMachine(
                location=location,
                cloudspace_id=CLOUDSPACE,
                vm_id=m.vm_id or 0,
                name=f"capvco-bench-{m.name}",
                status="RUNNING",
            )
            for m in machines
        ),
        batch_size=2000,
    )
    VgpuReservation.objects.bulk_create(
        (
            VgpuReservation(
                location=location,
                name=f"capvco-bench-{m.name}-gpu-0",
                vgpu_id=f"vgpu-{m.vm_id}",
                gpu_id=f"gpu-{((m.vm_id or 0) - 10_000) // INSTANCES_PER_CARD:05d}",
                state=VgpuReservation.State.ATTACHED,
                vm_id=m.vm_id,
                machine=m,
                owner_cluster="bench",
                owner_machine=m.name,
                owner_index=0,
            )
            for m in machines
        ),
        batch_size=2000,
    )
    # The listing began after all of it: the cards' counts are what it showed.
    GpuProfile.objects.filter(location=location).update(available_instances=0)
    Location.objects.filter(pk=location.pk).update(observation_started_at=timezone.now())


class Counted:
    """The queries, model instances loaded and the cyclic collector's time of a run."""

    def __init__(self) -> None:
        self.queries = self.instances = 0
        self.gc_seconds = 0.0
        self._gc_began = 0.0

    def _query(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.queries += 1  # every query, not the last 9,000 a capture keeps
        return execute(sql, params, many, context)

    def _instance(self, **kwargs: Any) -> None:
        self.instances += 1

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._gc_began

    def run(self, fn: Any) -> tuple[float, Any]:
        post_init.connect(self._instance)
        gc.callbacks.append(self._gc)
        try:
            with connection.execute_wrapper(self._query):
                start = time.perf_counter()
                value = fn()
                return time.perf_counter() - start, value
        finally:
            gc.callbacks.remove(self._gc)
            post_init.disconnect(self._instance)

    def figures(self, seconds: float, steps: int) -> dict[str, Any]:
        return {
            "seconds": round(seconds, 3),
            "queries": self.queries,
            "instances": self.instances,
            "gc_ms": round(self.gc_seconds * 1000, 1),
            "steps": steps,
        }


def plan_timed(cluster: Cluster, repeat: int) -> dict[str, Any]:
    best = math.inf
    counted = Counted()
    steps = 0
    for _ in range(repeat):
        counted = Counted()
        seconds, plan = counted.run(lambda: cluster_plan(Cluster.objects.get(pk=cluster.pk)))
        best, steps = min(best, seconds), len(plan.steps)
    return counted.figures(best, steps)


def pass_timed(cluster: Cluster, repeat: int = 1) -> dict[str, Any]:
    """A pass of the cluster as beat's task makes it (no step: no whitesky call); the
    best of `repeat`, the counts of the last."""
    best = math.inf
    counted = Counted()
    steps = 0
    for _ in range(repeat):
        counted = Counted()
        seconds, result = counted.run(
            lambda: cluster_reconcile(client=None, cluster=Cluster.objects.get(pk=cluster.pk))  # type: ignore[arg-type]
        )
        best, steps = min(best, seconds), len(result.plan)
    return counted.figures(best, steps)


def size_run(n: int, repeat: int) -> dict[str, dict[str, Any]]:
    VgpuReservation.objects.all().delete()
    VirtualMachine.objects.all().delete()
    Machine.objects.all().delete()
    MachinePool.objects.all().delete()
    ClusterSite.objects.all().delete()
    Cluster.objects.all().delete()
    GpuProfile.objects.all().delete()
    Location.objects.all().delete()
    Account.objects.all().delete()
    pools = world_make(n)
    cluster = pools[0].cluster
    figures = {"scale-up": plan_timed(cluster, repeat)}
    machines_make(pools)
    figures["pending"] = plan_timed(cluster, repeat)
    machines_run(pools[0].site.location)
    figures["steady"] = plan_timed(cluster, repeat)
    figures["pass-full"] = pass_timed(cluster)
    figures["pass-unchanged"] = pass_timed(cluster, repeat)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3, help="runs per state; the best counts")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
        return 2
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    try:
        for n in args.machines:
            results[n] = size_run(n, args.repeat)
            for state, figure in results[n].items():
                print(
                    f"{n:>6} machines  {state:<9} {figure['seconds']:>8.3f} s  "
                    f"{figure['queries']:>6} queries  {figure['instances']:>6} instances  "
                    f"{figure['gc_ms']:>7.1f} gc ms  {figure['steps']:>6} steps",
                    flush=True,
                )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
    if len(args.machines) > 1:
        small, large = args.machines[0], args.machines[-1]
        for state in ("steady", "pass-full", "pass-unchanged"):
            ratio = (results[large][state]["seconds"] / large) / (
                results[small][state]["seconds"] / small
            )
            print(f"{state}: time per machine at {large} / at {small}: {ratio:.2f}")
    print(json.dumps(results, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
