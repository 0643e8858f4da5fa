"""What the GPU lifecycle costs: whitesky calls, SQL queries and time, per machine and per pass.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_gpu_lifecycle.py [--machines 1000]

It starts its own whitesky simulator on a generated world (10 locations, one cloudspace and
enough A100 cards each) and measures:

1. provisioning one 1-GPU and one 2-GPU machine: the calls of the reconcile pass that
   provisions it after an observe (expected: at most 3 writes + 1 per extra GPU, and no
   per-machine list call);
2. a pass with nothing to do over ``--machines`` machines with 3 GPUs each (one cluster,
   one site and one pool per location), once converged: one observe of every location and
   one reconcile of the cluster. Expected: list calls only, in proportion to locations and
   cloudspaces (not machines), no whitesky write, and no database write but each
   location's stamp of the pass (when its listings began);
3. scaling the converged cluster up by one machine: that machine's calls and queries.

Prints a table per part, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import F  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from cloud.models import Account, Location  # noqa: E402
from cloud.observe import account_locations_observe  # noqa: E402
from cloud.whitesky import whitesky_client  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from clusters.reconcile import ReconcileResult, cluster_reconcile  # noqa: E402
from clusters.tasks import observe_location  # noqa: E402
from tests.bench.support import (  # noqa: E402
    QueryCounter,
    is_sql_write,
    postgresql_missing,
    throwaway_database,
    verdict,
)
from tests.whitesky_sim import WhiteskySimulator  # noqa: E402

LOCATIONS = 10
GPUS_PER_MACHINE = 3
INSTANCES_PER_CARD = 12  # four 3-GPU machines per card
GPU_TYPE = "NVIDIA A100"
PAGE_SIZE = settings.WHITESKY_VGPU_PAGE_SIZE
PER_MACHINE_LISTS = ("listCloudspaceVirtualMachines", "listCustomerVGPUS")
LOCATION_STAMP = 'UPDATE "cloud_location"'


# --- the world --------------------------------------------------------------------------


def location_name(i: int) -> str:
    return f"bench{i:02d}-dc01-001"


def cloudspace_id(i: int) -> str:
    return f"cs-bench-{i:02d}"


def image_id(i: int) -> int:
    return 100 + i


def machines_per_location(machines: int) -> list[int]:
    """`machines` spread over the locations as evenly as they go."""
    return [
        machines // LOCATIONS + (1 if i < machines % LOCATIONS else 0) for i in range(LOCATIONS)
    ]


def bench_world(machines: int) -> dict[str, Any]:
    """10 locations, each with one cloudspace and A100 cards for its share of machines,
    plus one spare card (room for the provisioning probes and the scale-up)."""
    locations = []
    for i, count in enumerate(machines_per_location(machines)):
        cards = math.ceil(count * GPUS_PER_MACHINE / INSTANCES_PER_CARD) + 1
        locations.append(
            {
                "name": location_name(i),
                "account_id": 1000 + i,
                "prices": {"vgu": 300.0},
                "gpu_cards": [
                    {
                        "vendor": "NVIDIA",
                        "model": "A100",
                        "cards": cards,
                        "instances_per_card": INSTANCES_PER_CARD,
                    }
                ],
                "external_networks": [
                    {
                        "external_network_id": 1000 + i,
                        "name": f"ext-{i:02d}",
                        "cidr": f"10.70.{i}.0/24",
                        "gateway": f"10.70.{i}.1",
                    }
                ],
                "images": [{"image_id": image_id(i), "name": "Ubuntu 24.04"}],
                "cloudspaces": [
                    {
                        "cloudspace_id": cloudspace_id(i),
                        "name": f"bench-{i:02d}",
                        "private_network": "10.128.0.0/16",
                    }
                ],
            }
        )
    return {
        "customer": {"customer_id": "cust-bench", "name": "Bench"},
        "currency": "EUR",
        "locations": locations,
    }


# --- the control plane, wired to the simulator ---------------------------------------------


@dataclass
class Plane:
    sim: WhiteskySimulator
    account: Account

    def cluster(self, name: str, locations: range) -> Cluster:
        cluster = Cluster.objects.create(name=name, account=self.account)
        for i in locations:
            ClusterSite.objects.create(
                cluster=cluster,
                location=Location.objects.get(account=self.account, name=location_name(i)),
                cloudspace_id=cloudspace_id(i),
                image_id=image_id(i),
            )
        return cluster

    def gpu_pool(
        self, cluster: Cluster, name: str, i: int, *, replicas: int, gpus: int
    ) -> MachinePool:
        return MachinePool.objects.create(
            cluster=cluster,
            site=cluster.sites.get(location__name=location_name(i)),
            name=name,
            replicas=replicas,
            gpu_type=GPU_TYPE,
            gpu_count=gpus,
        )

    def observe(self) -> None:
        """One observe pass, as beat runs it: the account's locations, then each location."""
        with whitesky_client(self.account) as client:
            account_locations_observe(client=client, account=self.account)
        for location_id in self.account.locations.values_list("pk", flat=True):
            observe_location(location_id)

    def reconcile(self, cluster: Cluster) -> ReconcileResult:
        with whitesky_client(self.account) as client:
            return cluster_reconcile(client=client, cluster=Cluster.objects.get(pk=cluster.pk))


def fresh_plane(sim: WhiteskySimulator, world: dict[str, Any]) -> Plane:
    """An empty database and a fresh simulated world, with an account that knows its locations."""
    call_command("flush", interactive=False, verbosity=0)
    sim.reset(world)
    account = Account.objects.create(
        name="bench",
        api_url=sim.api_url,
        iam_url=sim.iam_url,
        customer_id=sim.customer_id,
        credential=sim.token(),
    )
    with whitesky_client(account) as client:
        account_locations_observe(client=client, account=account)
    return Plane(sim=sim, account=account)


# --- measuring ----------------------------------------------------------------------------


@dataclass
class Measurement:
    """What one piece of work cost: whitesky calls, SQL queries, wall time."""

    seconds: float = 0.0
    reads: int = 0
    writes: int = 0
    by_operation: Counter[str] = field(default_factory=Counter)
    queries: int = 0
    db_writes: int = 0
    location_stamps: int = 0
    """Of the writes: updates of a location (an observe stamps each location once)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 4),
            "ws_reads": self.reads,
            "ws_writes": self.writes,
            "ws_calls": dict(sorted(self.by_operation.items())),
            "sql_queries": self.queries,
            "sql_writes": self.db_writes,
        }


@contextmanager
def measured(sim: WhiteskySimulator, *, keep_queries: bool = True) -> Iterator[Measurement]:
    """Measure the block: the simulator's call log, the SQL it issues, its wall time.

    `keep_queries` uses CaptureQueriesContext (exact, at most 9000 queries); otherwise a
    counting wrapper that keeps nothing.
    """
    m = Measurement()
    sim.clear_calls()
    if keep_queries:
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            yield m
            m.seconds = time.perf_counter() - started
        if len(captured) >= connection.queries_limit:
            raise RuntimeError(
                "more queries than CaptureQueriesContext keeps; use keep_queries=False"
            )
        m.queries = len(captured)
        m.db_writes = sum(is_sql_write(q["sql"]) for q in captured.captured_queries)
        m.location_stamps = sum(
            q["sql"].startswith(LOCATION_STAMP) for q in captured.captured_queries
        )
    else:
        counter = QueryCounter()
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            yield m
            m.seconds = time.perf_counter() - started
        m.queries, m.db_writes = counter.queries, counter.writes
    log = sim.calls()
    m.reads, m.writes = log["reads"], log["writes"]
    m.by_operation = Counter(str(c["operation"]) for c in log["calls"])


# --- 1. provisioning one machine --------------------------------------------------------


def measure_provisioning_one_machine(
    sim: WhiteskySimulator, world: dict[str, Any], gpus: int
) -> tuple[Measurement, bool]:
    """The reconcile pass (after an observe) that provisions one machine with `gpus` vGPUs."""
    plane = fresh_plane(sim, world)
    cluster = plane.cluster("probe", range(1))
    plane.gpu_pool(cluster, f"g{gpus}", 0, replicas=1, gpus=gpus)
    plane.observe()
    with measured(sim) as m:
        result = plane.reconcile(cluster)
    if result.errors or len(result.applied) != 1:
        raise RuntimeError(f"provisioning failed: {result}")
    held = [v for v in sim.state()["vgpus"] if v["status"] != "DESTROYED" and v["vm_id"]]
    if len(held) != gpus:
        raise RuntimeError(f"expected {gpus} attached vGPUs, the simulator holds {len(held)}")
    ok = m.writes <= 3 + (gpus - 1) and not any(m.by_operation[op] for op in PER_MACHINE_LISTS)
    return m, ok


# --- 2. a pass with nothing to do over a big cluster ---------------------------------------


@dataclass
class Converged:
    plane: Plane
    cluster: Cluster
    passes: int
    cost: Measurement


def converge_big_cluster(sim: WhiteskySimulator, world: dict[str, Any], machines: int) -> Converged:
    """One cluster, one site and one 3-GPU pool per location; observe + reconcile until idle."""
    plane = fresh_plane(sim, world)
    cluster = plane.cluster("bench", range(LOCATIONS))
    for i, replicas in enumerate(machines_per_location(machines)):
        plane.gpu_pool(cluster, f"p{i:02d}", i, replicas=replicas, gpus=GPUS_PER_MACHINE)
    passes = 0
    with measured(sim, keep_queries=False) as cost:
        for passes in range(1, 6):  # noqa: B007 - reported after the loop
            plane.observe()
            result = plane.reconcile(cluster)
            if result.errors:
                raise RuntimeError(f"converging failed: {result.errors[:5]}")
            if not result.plan:
                break
        else:
            raise RuntimeError("the cluster did not converge in 5 passes")
    running = Machine.objects.filter(pool__cluster=cluster, phase=Machine.Phase.RUNNING).count()
    held = sum(1 for v in sim.state()["vgpus"] if v["status"] != "DESTROYED" and v["vm_id"])
    if running != machines or held != machines * GPUS_PER_MACHINE:
        raise RuntimeError(f"converged to {running} running machines and {held} attached vGPUs")
    return Converged(plane=plane, cluster=cluster, passes=passes, cost=cost)


def expected_idle_calls(sim: WhiteskySimulator) -> Counter[str]:
    """List calls an observe pass needs: per location the GPU profiles, every page of vGPUs
    and the VMs of each cluster cloudspace; once the customer's locations."""
    reservations = Counter(
        v["location"] for v in sim.state()["vgpus"] if v["status"] != "DESTROYED"
    )
    expected: Counter[str] = Counter({"listCustomerLocations": 1})
    for i in range(LOCATIONS):
        expected["listAvailableGPUProfiles"] += 1
        expected["listCustomerVGPUS"] += max(
            1, math.ceil(reservations[location_name(i)] / PAGE_SIZE)
        )
        expected["listCloudspaceVirtualMachines"] += 1  # one cluster cloudspace per location
    return expected


def measure_idle_observe(big: Converged) -> Measurement:
    with measured(big.plane.sim) as m:
        big.plane.observe()
    return m


def measure_idle_reconcile(big: Converged) -> tuple[Measurement, ReconcileResult]:
    with measured(big.plane.sim) as m:
        result = big.plane.reconcile(big.cluster)
    return m, result


# --- 3. one more machine in the big cluster ------------------------------------------------


def measure_scale_up_by_one(big: Converged) -> tuple[Measurement, bool]:
    """Pool p00 gets one more replica; the reconcile pass (after an observe) that provisions it."""
    MachinePool.objects.filter(cluster=big.cluster, name="p00").update(replicas=F("replicas") + 1)
    big.plane.observe()
    with measured(big.plane.sim) as m:
        result = big.plane.reconcile(big.cluster)
    if result.errors or len(result.applied) != 1:
        raise RuntimeError(f"scale-up failed: {result}")
    ok = m.writes <= 3 + (GPUS_PER_MACHINE - 1) and not any(
        m.by_operation[op] for op in PER_MACHINE_LISTS
    )
    return m, ok


# --- reporting ----------------------------------------------------------------------------


def print_measurements(title: str, rows: list[tuple[str, Measurement]]) -> None:
    print(f"\n{title}")
    print(
        f"  {'':<34} {'seconds':>9} {'ws reads':>9} {'ws writes':>9} {'SQL':>7} {'SQL writes':>10}"
    )
    for label, m in rows:
        print(
            f"  {label:<34} {m.seconds:>9.3f} {m.reads:>9} {m.writes:>9} {m.queries:>7} "
            f"{m.db_writes:>10}"
        )


def print_calls(title: str, calls: Counter[str], expected: Counter[str] | None = None) -> None:
    print(f"  {title}")
    for op in sorted(set(calls) | set(expected or {})):
        extra = f"  (expected {expected[op]})" if expected is not None else ""
        print(f"    {op:<34} {calls[op]:>6}{extra}")


def peak_memory_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# --- main ---------------------------------------------------------------------------------


def run(sim: WhiteskySimulator, world: dict[str, Any], machines: int) -> dict[str, Any]:
    summary: dict[str, Any] = {"machines": machines, "locations": LOCATIONS}

    # 1. provisioning one machine
    probes = []
    for gpus in (1, 2):
        m, ok = measure_provisioning_one_machine(sim, world, gpus)
        probes.append((f"provision one {gpus}-GPU machine", m, ok))
        summary[f"provision_{gpus}gpu"] = {**m.as_json(), "pass": ok}
    print_measurements(
        "1. provisioning one machine (the reconcile pass after an observe)",
        [(label, m) for label, m, _ in probes],
    )
    for label, m, ok in probes:
        print_calls(
            f"{label}: {verdict(ok)} (<= 3 writes + 1 per extra GPU, no per-machine list)",
            m.by_operation,
        )

    # 2. a pass with nothing to do
    print(
        f"\n2. converging {machines} machines x {GPUS_PER_MACHINE} GPUs "
        f"over {LOCATIONS} locations ...",
        flush=True,
    )
    big = converge_big_cluster(sim, world, machines)
    c = big.cost
    print(
        f"  converged in {big.passes} passes, {c.seconds:.1f} s: {c.writes} whitesky writes "
        f"({c.writes / machines:.1f}/machine), {c.reads} reads, {c.queries} SQL queries "
        f"({c.queries / machines:.1f}/machine), {c.db_writes} SQL writes "
        f"({c.db_writes / machines:.1f}/machine)"
    )
    expected = expected_idle_calls(sim)
    observe = measure_idle_observe(big)
    reconcile, result = measure_idle_reconcile(big)
    idle_calls = observe.by_operation + reconcile.by_operation
    only_lists = all(op.startswith("list") for op in idle_calls)
    ok_calls = only_lists and idle_calls == expected
    ok_ws_writes = observe.writes + reconcile.writes == 0
    ok_db_writes = (
        observe.db_writes == observe.location_stamps == LOCATIONS and reconcile.db_writes == 0
    )
    ok_plan = not result.plan
    print_measurements(
        f"   a pass with nothing to do ({machines} machines, {machines * GPUS_PER_MACHINE} "
        f"reservations, {LOCATIONS} locations)",
        [("observe every location", observe), ("reconcile the cluster", reconcile)],
    )
    print_calls("whitesky calls of the pass, by operationId:", idle_calls, expected)
    print(f"  calls: list calls only, as expected per location and cloudspace: {verdict(ok_calls)}")
    print(f"  whitesky writes 0: {verdict(ok_ws_writes)}")
    print(
        f"  database writes: only each location's stamp of the pass ({LOCATIONS}): "
        f"{verdict(ok_db_writes)}"
    )
    print(f"  empty plan: {verdict(ok_plan)} ({len(result.plan)} steps)")
    summary["converge"] = {**c.as_json(), "passes": big.passes}
    summary["idle_observe"] = observe.as_json()
    summary["idle_reconcile"] = {**reconcile.as_json(), "plan_steps": len(result.plan)}
    summary["idle_expected_calls"] = dict(sorted(expected.items()))
    summary["idle_pass"] = ok_calls and ok_ws_writes and ok_db_writes and ok_plan

    # 3. one more machine in the big cluster
    scale_up, ok = measure_scale_up_by_one(big)
    print_measurements(
        f"3. scaling the {machines}-machine cluster up by one",
        [("provision the new machine", scale_up)],
    )
    print_calls(
        f"{verdict(ok)} (<= {3 + GPUS_PER_MACHINE - 1} writes, no per-machine list)",
        scale_up.by_operation,
    )
    summary["scale_up_1"] = {**scale_up.as_json(), "pass": ok}

    summary["peak_rss_mib"] = round(peak_memory_mib(), 1)
    print(f"\npeak memory of this process (ru_maxrss): {summary['peak_rss_mib']} MiB")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", type=int, default=1000, help="machines of the big cluster")
    args = parser.parse_args()
    if postgresql_missing():
        return 2

    world = bench_world(args.machines)
    with throwaway_database(), tempfile.TemporaryDirectory() as tmp:
        world_file = Path(tmp) / "world.json"
        world_file.write_text(json.dumps(world))
        with WhiteskySimulator(world=world_file) as sim:
            summary = run(sim, world, args.machines)
    print(json.dumps(summary, separators=(",", ":")))
    ok = (
        summary["provision_1gpu"]["pass"]
        and summary["provision_2gpu"]["pass"]
        and summary["idle_pass"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
