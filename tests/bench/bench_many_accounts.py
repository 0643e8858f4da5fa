"""What an idle round over many accounts costs on a real worker pool, and whether each
account's pass ends within its interval.

Run (PostgreSQL and Redis; a throw-away test database ``test_<name>`` is made and dropped,
the broker's keys carry this run's prefix in Redis database 15)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_many REDIS_URL=redis://127.0.0.1:6379 \\
        .venv/bin/python tests/bench/bench_many_accounts.py [--accounts 50] \\
        [--machines-per-account 2000] [--workers 2] [--rounds 3] [--pgbouncer]

Each account is its own whitesky customer with its own simulator process (a simulator
holds one customer), three locations with A100 cards, a cloudspace and an image each, and
one cluster with a site and a one-GPU pool per location, its machines spread over them.
The converged state is seeded, not converged: the simulator makes the running VMs with
their vGPUs attached (``POST /_sim/seed``), and the database gets the account's locations
and catalog from a real observation, then the cluster, sites, pools, machines (with their
VM ids and spec) and attached reservations in bulk.

Then, ``--rounds`` times, it sends what beat sends on a tick (every entry of the beat
schedule but the daily history prune: observe, reconcile, orphan sweep, catalog, SR-IOV,
notifications, heartbeat) to a real Celery worker (prefork, ``--workers`` processes, no
beat) on Redis, and waits until the queue is drained and no task is in flight. The first
round fills the mirror (VMs, vGPUs, cards seen); each later one should find nothing to do.
The tables are vacuumed and analysed before the first round and after it, as autovacuum
long has in a running deployment. Per round it reports the wall time from the send to the
last task's end, the deepest the queue got, each task's SQL queries and writes by table
(the worker counts them: ``tests/bench/task_costs.py``) and whitesky calls (each
simulator's call log), per account, whether each account's observe and reconcile passes
ended within their intervals (``OBSERVE_INTERVAL_SECONDS``, ``RECONCILE_INTERVAL_SECONDS``)
counted from the send, and what the round cost the host: CPU of the worker and the
simulators, the database's statement time, sessions and commits. Then the database's
rows, sizes and dead rows per table.

With ``--pgbouncer`` the worker reaches PostgreSQL through a PgBouncer of the run's own, in
session pooling mode (the ``pgbouncer`` program, Debian's package of that name).

Prints the load average beside the figures, a table, and one JSON line. Exits 1 when the
last round wrote to whitesky or wrote a row beyond each location's stamp of its pass and
beat's heartbeat, or a task failed; accounts whose pass ended late are reported, not
failed on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.bills import account_bills_check  # noqa: E402
from billing.rollups import HOUR, hour_of  # noqa: E402
from capvco_web.celery import app  # noqa: E402
from cloud.models import Account  # noqa: E402
from cloud.observe import account_catalog_observe, account_locations_observe  # noqa: E402
from cloud.whitesky import whitesky_client  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from gpus import naming  # noqa: E402
from gpus.models import VgpuReservation  # noqa: E402
from tests.bench.support import (  # noqa: E402
    celery_worker,
    postgresql_missing,
    throwaway_database,
    verdict,
    wait_for,
)
from tests.e2e.processes import broker_flush  # noqa: E402
from tests.servers import free_port  # noqa: E402
from tests.whitesky_sim import WhiteskySimulator  # noqa: E402

PGBOUNCER_USER = "postgres"
LOCATIONS = ("bench0-dc01-001", "bench1-dc01-001", "bench2-dc01-001")
INSTANCES_PER_CARD = 16
GPU_TYPE = "NVIDIA A100"
IMAGE = 100
SKIPPED_ENTRIES = ("history-prune",)  # daily housekeeping, no part of a tick
# Writes an idle round may make: each location's stamp of its pass, beat's heartbeat.
EXPECTED_WRITES = ("cloud_location", "capvco_web_heartbeat")
BILL_CHECKS = "billing_billcheck"
# Writes of an hour that ended during the round: the money pass's sample of it.
HOURLY_SAMPLE = ("billing_rollup", "billing_costrollup", "billing_capacityrollup")
# A cluster's first empty plan records what it read, once: the next passes skip it.
PLAN_RECORD = "clusters_clusterstatus"
OBSERVE_TASKS = ("clusters.tasks.observe_account", "clusters.tasks.observe_location")
RECONCILE_TASKS = ("clusters.tasks.reconcile_cluster", "clusters.tasks.reconcile_machine")
BY_ACCOUNT = (
    "clusters.tasks.observe_account",
    "clusters.tasks.observe_catalog",
    "billing.tasks.bill_check_account",
)
OBSERVE_LOCATION = "clusters.tasks.observe_location"
BY_LOCATION = ("clusters.tasks.observe_location", "clusters.tasks.orphan_sweep_location")
BY_CLUSTER = ("clusters.tasks.reconcile_cluster",)
MACHINE_TASK = "clusters.tasks.reconcile_machine"  # its argument: the step, with its cluster
TABLES = (
    "cloud_account",
    "cloud_location",
    "cloud_virtualmachine",
    "clusters_machine",
    "gpus_vgpureservation",
    "gpus_listedvgpu",
    "gpus_gpuprofile",
)


# --- the worlds ---------------------------------------------------------------------------


def cloudspace_id(j: int) -> str:
    return f"cs-bench-{j}"


def machines_per_location(machines: int) -> list[int]:
    """An account's machines spread over its locations as evenly as they go."""
    n = len(LOCATIONS)
    return [machines // n + (1 if j < machines % n else 0) for j in range(n)]


def account_world(index: int, split: list[int], gpus: int) -> dict[str, Any]:
    """One customer: three locations with A100 cards for its machines and one spare."""
    locations = []
    for j, (name, count) in enumerate(zip(LOCATIONS, split, strict=True)):
        locations.append(
            {
                "name": name,
                "account_id": 1000 + j,
                "prices": {"vgu": 300.0},
                "gpu_cards": [
                    {
                        "vendor": "NVIDIA",
                        "model": "A100",
                        "cards": math.ceil(count * gpus / INSTANCES_PER_CARD) + 1,
                        "instances_per_card": INSTANCES_PER_CARD,
                    }
                ],
                "external_networks": [
                    {
                        "external_network_id": 1000 + j,
                        "name": f"ext-{j}",
                        "cidr": f"10.70.{j}.0/24",
                        "gateway": f"10.70.{j}.1",
                    }
                ],
                "images": [{"image_id": IMAGE + j, "name": "Ubuntu 24.04"}],
                "cloudspaces": [
                    {
                        "cloudspace_id": cloudspace_id(j),
                        "name": f"bench-{j}",
                        "private_network": "10.128.0.0/16",
                    }
                ],
            }
        )
    return {
        "customer": {"customer_id": f"cust-{index:03d}", "name": f"Customer {index}"},
        "currency": "EUR",
        "locations": locations,
    }


@contextmanager
def simulators(worlds: list[dict[str, Any]], folder: Path) -> Iterator[list[WhiteskySimulator]]:
    """One simulator process per world, started a few at a time, all stopped at the end."""
    sims = []
    for i, world in enumerate(worlds):
        path = folder / f"world-{i:03d}.json"
        path.write_text(json.dumps(world))
        sims.append(WhiteskySimulator(world=path))
    with ExitStack() as stack:
        for sim in sims:
            stack.callback(sim.stop)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda sim: sim.start(timeout=60), sims))
        yield sims


@contextmanager
def pgbouncer(folder: Path) -> Iterator[int]:
    """A PgBouncer of this run, in session pooling mode, in front of DATABASE_URL's server,
    on a free port (yielded); stopped at the end, so that the test database can be dropped.
    It refuses to run as root: as root, it runs as the server's user."""
    db = connection.settings_dict
    port = free_port()
    home = folder / "pgbouncer"
    home.mkdir()
    config = home / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={db['HOST']} port={db['PORT']} user={db['USER']}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = session\nserver_reset_query = DISCARD ALL\n"
        "max_client_conn = 200\ndefault_pool_size = 20\n"
    )
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", PGBOUNCER_USER, "--"]
        folder.chmod(0o711)  # the user reaches its folder, and nothing else of this run's
        shutil.chown(home, PGBOUNCER_USER)
    with (home / "pgbouncer.log").open("wb") as log:
        process = subprocess.Popen(
            [*as_user, "pgbouncer", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(lambda: port_open(port), "PgBouncer to listen", 30)
            yield port
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


# --- the converged state, seeded ----------------------------------------------------------


@dataclass
class Seeded:
    account: Account
    sim: WhiteskySimulator
    cluster: Cluster
    location_ids: list[int]


def account_seed(index: int, sim: WhiteskySimulator, split: list[int], gpus: int) -> Seeded:
    """The account as a converged control plane holds it: the simulator's running VMs and
    attached vGPUs, and the rows that own them."""
    account = Account.objects.create(
        name=f"bench-{index:03d}",
        api_url=sim.api_url,
        iam_url=sim.iam_url,
        customer_id=sim.customer_id,
        credential=sim.token(),
    )
    with whitesky_client(account) as client:
        locations = {
            location.name: location
            for location in account_locations_observe(client=client, account=account)
        }
        account_catalog_observe(client=client, account=account, locations=list(locations.values()))
    cluster = Cluster.objects.create(name=f"c{index:03d}", account=account)
    pools = []
    for j, (name, count) in enumerate(zip(LOCATIONS, split, strict=True)):
        site = ClusterSite.objects.create(
            cluster=cluster,
            location=locations[name],
            cloudspace_id=cloudspace_id(j),
            image_id=IMAGE + j,
        )
        pool = MachinePool.objects.create(
            cluster=cluster,
            site=site,
            name=f"p{j}",
            replicas=count,
            gpu_type=GPU_TYPE,
            gpu_count=gpus,
            next_index=count,
        )
        names = [
            naming.vm_name(cluster.name, naming.machine_name(pool.name, k)) for k in range(count)
        ]
        sim.seed(cloudspace_id(j), vm_names=names, vm_gpus=gpus, running=True)
        pools.append((pool, locations[name]))
    state = sim.state()
    vm_ids = {vm["name"]: vm["vm_id"] for vm in state["vms"]}
    vgpus = {vgpu["vgpu_name"]: vgpu for vgpu in state["vgpus"]}
    now = timezone.now()
    for pool, location in pools:
        machines = Machine.objects.bulk_create(
            [
                Machine(
                    pool=pool,
                    name=naming.machine_name(pool.name, k),
                    index=k,
                    vm_id=vm_ids[naming.vm_name(cluster.name, naming.machine_name(pool.name, k))],
                    vm_created_at=now - timedelta(hours=1),
                    vm_started_at=now - timedelta(hours=1),
                    spec=pool.machine_spec(),
                    phase=Machine.Phase.RUNNING,
                )
                for k in range(pool.replicas)
            ],
            batch_size=1000,
        )
        reservations = []
        for machine in machines:
            for n in range(gpus):
                name = naming.vgpu_name(cluster.name, machine.name, n)
                vgpu = vgpus[name]
                reservations.append(
                    VgpuReservation(
                        location=location,
                        name=name,
                        vgpu_id=vgpu["vgpu_id"],
                        gpu_id=vgpu["gpu_id"],
                        state=VgpuReservation.State.ATTACHED,
                        vm_id=machine.vm_id,
                        machine=machine,
                        owner_cluster=cluster.name,
                        owner_machine=machine.name,
                        owner_index=n,
                    )
                )
        VgpuReservation.objects.bulk_create(reservations, batch_size=1000)
    return Seeded(
        account=account,
        sim=sim,
        cluster=cluster,
        location_ids=[location.pk for location in locations.values()],
    )


# --- one round on the worker pool ---------------------------------------------------------


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None  # ended


def cpu_seconds(pids: set[int]) -> dict[int, float]:
    """User and system CPU seconds each process has used so far."""
    used = {}
    for pid in pids:
        if (fields := process_stat(pid)) is not None:
            used[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return used


def processes_where(test: Callable[[list[str]], bool]) -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        fields = process_stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and test(fields):
            pids.add(int(entry.name))
    return pids


@dataclass
class CpuWatch:
    """What a round cost the host: CPU seconds of the worker's processes and of the
    simulators; of the database (``pg_stat_database``, as its backends come and go with
    the connections), the seconds it spent running statements, the sessions opened and
    the transactions committed (the counts include this process's few)."""

    worker_group: int
    groups: dict[str, set[int]] = field(default_factory=dict)
    before: dict[int, float] = field(default_factory=dict)
    database_before: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        me = os.getpid()
        self.groups = {
            "worker": processes_where(lambda f: int(f[2]) == self.worker_group),
            "simulators": processes_where(
                lambda f: int(f[1]) == me and int(f[2]) != self.worker_group
            ),
        }
        self.before = cpu_seconds(set().union(*self.groups.values()))
        self.database_before = database_counters()

    def used(self) -> dict[str, float]:
        used = {
            f"{name}_cpu": round(
                sum(t - self.before.get(pid, 0.0) for pid, t in cpu_seconds(pids).items()), 2
            )
            for name, pids in self.groups.items()
        }
        time.sleep(STATS_FLUSH)
        for name, value in database_counters().items():
            used[name] = round(value - self.database_before.get(name, 0.0), 2)
        return used


@dataclass
class TaskRun:
    task: str
    args: list[Any]
    start: float
    end: float
    cpu: float
    state: str
    queries: int
    writes: dict[str, int]

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class AccountCost:
    """One account's share of a round."""

    tasks: int = 0
    queries: int = 0
    writes: Counter[str] = field(default_factory=Counter)
    busy: float = 0.0
    """Seconds its tasks ran, summed (worker time)."""
    cpu: float = 0.0
    """CPU seconds its tasks used, summed."""
    observe_end: float = 0.0
    reconcile_end: float = 0.0
    """Seconds from the send to the end of its last observe (reconcile) task."""
    ws_reads: int = 0
    ws_writes: int = 0
    ws_calls: Counter[str] = field(default_factory=Counter)


@dataclass
class Round:
    seconds: float
    queue_peak: int
    in_flight_peak: int
    connections_peak: int
    load: tuple[float, float, float]
    cpu: dict[str, float]
    """CPU seconds of the worker's processes and the simulators, seconds the database ran
    statements."""
    tasks: list[TaskRun]
    accounts: list[AccountCost]
    shared: AccountCost
    unobserved: int
    """Locations no observation of the round ran for (one dropped unrun: expired)."""
    hours_ended: int = 0
    """Hours that ended since the bill checks were made: each location's check of each is
    a change, no idle write."""
    first_idle: bool = False
    """The round after the mirror filled: each cluster's first empty plan is recorded."""

    @property
    def failed(self) -> list[TaskRun]:
        return [t for t in self.tasks if t.state != "SUCCESS"]

    def writes(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for task in self.tasks:
            total.update(task.writes)
        return total

    def unexpected_writes(self) -> int:
        writes = self.writes()
        writes[BILL_CHECKS] = max(
            0, writes[BILL_CHECKS] - self.hours_ended * len(self.accounts) * len(LOCATIONS)
        )
        expected = EXPECTED_WRITES + (HOURLY_SAMPLE if self.hours_ended else ())
        if self.first_idle:  # one cluster per account
            writes[PLAN_RECORD] = max(0, writes[PLAN_RECORD] - len(self.accounts))
        return sum(n for table, n in writes.items() if table not in expected)

    @property
    def ws_writes(self) -> int:
        return sum(a.ws_writes for a in self.accounts)

    def late(self, observe: float, reconcile: float) -> int:
        return sum(
            1 for a in self.accounts if a.observe_end > observe or a.reconcile_end > reconcile
        )


def read_tasks(path: Path, since: float) -> list[TaskRun]:
    if not path.exists():
        return []
    runs = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["start"] >= since:
            runs.append(
                TaskRun(
                    task=record["task"],
                    args=record["args"],
                    start=record["start"],
                    end=record["end"],
                    cpu=record["cpu"],
                    state=str(record["state"]),
                    queries=record["queries"],
                    writes=record["writes"],
                )
            )
    return runs


class Broker:
    """The depth of this run's queue and the messages taken but not yet acknowledged."""

    def __init__(self) -> None:
        prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
        self.redis = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        self.queue = f"{prefix}{app.conf.task_default_queue}"
        self.unacked = f"{prefix}unacked"

    def depth(self) -> tuple[int, int]:
        pipe = self.redis.pipeline()
        pipe.llen(self.queue)
        pipe.hlen(self.unacked)
        queued, taken = pipe.execute()
        return int(queued), int(taken)


def database_backends() -> set[int]:
    """The server processes of this run's database, but this process's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return {int(pid) for (pid,) in cursor.fetchall()}


# A backend reports its statistics at most once a second, and when its session ends.
STATS_FLUSH = 1.5


def database_counters() -> dict[str, float]:
    """The database's counts so far: seconds its backends spent running statements,
    sessions opened, transactions committed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT active_time / 1000, sessions, xact_commit FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        row = cursor.fetchone()
    if row is None:
        return {}
    names = ("database_active", "database_sessions", "database_commits")
    return dict(zip(names, map(float, row), strict=True))


def vacuum() -> None:
    """What autovacuum has long done in a running deployment: tables vacuumed, analysed."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
        # Its counts go to the statistics now, not into the next round's.
        cursor.execute("SELECT pg_stat_force_next_flush()")


def round_send() -> None:
    """What beat sends on a tick, sent once, with beat's options."""
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        if name in SKIPPED_ENTRIES:
            continue
        options = entry.get("options", {})
        assert isinstance(options, dict)
        app.send_task(str(entry["task"]), **options)


def round_run(
    seeded: list[Seeded],
    broker: Broker,
    cpu: CpuWatch,
    costs_file: Path,
    timeout: float,
    checked_until: datetime | None,
    first_idle: bool,
) -> Round:
    for world in seeded:
        world.sim.clear_calls()
    queue_peak = in_flight_peak = connections_peak = 0
    cpu.start()
    started = time.time()
    round_send()
    deadline = time.monotonic() + timeout
    last_db_look = 0.0
    quiet = 0
    while quiet < 3:  # drained three looks in a row: nothing queued, nothing taken
        queued, taken = broker.depth()
        queue_peak, in_flight_peak = max(queue_peak, queued), max(in_flight_peak, taken)
        quiet = quiet + 1 if queued == taken == 0 else 0
        if time.monotonic() - last_db_look > 0.5:
            connections_peak = max(connections_peak, len(database_backends()))
            last_db_look = time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the round did not drain within {timeout:.0f} s")
        time.sleep(0.05)
    tasks = read_tasks(costs_file, started)
    cpu_used = cpu.used()
    load = os.getloadavg()
    accounts, shared = costs_by_account(seeded, tasks, started)
    # An observation stamps its location; a task that found its account's share of the
    # worker taken sent itself again, and observed nothing.
    observed = {
        t.args[0]
        for t in tasks
        if t.task == OBSERVE_LOCATION and t.state == "SUCCESS" and t.writes.get("cloud_location")
    }
    locations = {pk for world in seeded for pk in world.location_ids}
    return Round(
        seconds=max((t.end for t in tasks), default=started) - started,
        queue_peak=queue_peak,
        in_flight_peak=in_flight_peak,
        connections_peak=connections_peak,
        load=load,
        cpu=cpu_used,
        tasks=tasks,
        accounts=accounts,
        shared=shared,
        unobserved=len(locations - observed),
        hours_ended=0 if checked_until is None else hours_between(checked_until, timezone.now()),
        first_idle=first_idle,
    )


def hours_between(start: datetime, end: datetime) -> int:
    """How many whole hours began after `start` and by `end`."""
    return int((hour_of(end) - hour_of(start)) / HOUR)


def costs_by_account(
    seeded: list[Seeded], tasks: list[TaskRun], started: float
) -> tuple[list[AccountCost], AccountCost]:
    """Each task's cost to the account it worked for (by its arguments); the fan-outs and
    the tasks of no account are shared."""
    of_account = {world.account.pk: i for i, world in enumerate(seeded)}
    of_location = {pk: i for i, world in enumerate(seeded) for pk in world.location_ids}
    of_cluster = {world.cluster.pk: i for i, world in enumerate(seeded)}
    accounts = [AccountCost() for _ in seeded]
    shared = AccountCost()
    for task in tasks:
        owner: int | None = None
        if task.task in BY_ACCOUNT:
            owner = of_account.get(task.args[0])
        elif task.task in BY_LOCATION:
            owner = of_location.get(task.args[0])
        elif task.task in BY_CLUSTER:
            owner = of_cluster.get(task.args[0])
        elif task.task == MACHINE_TASK:
            owner = of_cluster.get(task.args[0]["cluster_id"])
        cost = shared if owner is None else accounts[owner]
        cost.tasks += 1
        cost.queries += task.queries
        cost.writes.update(task.writes)
        cost.busy += task.seconds
        cost.cpu += task.cpu
        if task.task in OBSERVE_TASKS:
            cost.observe_end = max(cost.observe_end, task.end - started)
        if task.task in RECONCILE_TASKS:
            cost.reconcile_end = max(cost.reconcile_end, task.end - started)
    for world, cost in zip(seeded, accounts, strict=True):
        log = world.sim.calls()
        cost.ws_reads, cost.ws_writes = log["reads"], log["writes"]
        cost.ws_calls = Counter(str(c["operation"]) for c in log["calls"])
    return accounts, shared


def bills_backfill(seeded: list[Seeded]) -> dict[str, float]:
    """The bill checks of the hours before the seed, as a control plane that ran for hours
    has made them: each account's check, here in this process, until none is due. Without
    them, the idle rounds would be its first checks of BILL_CHECK_HOURS_BACK hours a
    location, at most BILL_CHECK_CALLS_PER_PASS an account and pass."""
    started = time.monotonic()
    checks = 0
    for world in seeded:
        while True:
            with whitesky_client(world.account) as client:
                results = account_bills_check(
                    client=client, account=world.account, now=timezone.now()
                )
            written = sum(r.written for r in results)
            checks += written
            if not written:
                break
    seconds = round(time.monotonic() - started, 1)
    print(f"  bill checks of the hours before the seed: {checks} in {seconds} s", flush=True)
    return {"checks": checks, "seconds": seconds}


# --- the database -------------------------------------------------------------------------


def table_facts() -> dict[str, dict[str, int]]:
    """Rows, dead rows, table and index bytes of the tables that grow with machines."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute(
            "SELECT relname, n_live_tup, n_dead_tup, pg_table_size(relid), "
            "pg_indexes_size(relid) FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [list(TABLES)],
        )
        rows = cursor.fetchall()
    return {
        name: {"rows": live, "dead": dead, "table_bytes": table, "index_bytes": index}
        for name, live, dead, table, index in rows
    }


def max_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


# --- reporting ----------------------------------------------------------------------------


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {"min": 0, "median": 0, "max": 0}
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def tasks_by_name(tasks: list[TaskRun]) -> dict[str, list[TaskRun]]:
    named: dict[str, list[TaskRun]] = {}
    for task in tasks:
        named.setdefault(task.task, []).append(task)
    return named


def round_json(r: Round) -> dict[str, Any]:
    accounts = r.accounts
    return {
        "seconds": round(r.seconds, 2),
        "tasks": len(r.tasks),
        "failed_tasks": len(r.failed),
        "queue_peak": r.queue_peak,
        "in_flight_peak": r.in_flight_peak,
        "db_connections_peak": r.connections_peak,
        "sql_queries": sum(t.queries for t in r.tasks),
        "sql_writes": dict(sorted(r.writes().items())),
        "sql_writes_unexpected": r.unexpected_writes(),
        "ws_reads": sum(a.ws_reads for a in accounts),
        "ws_writes": r.ws_writes,
        "per_account": {
            "sql_queries": spread([a.queries for a in accounts]),
            "ws_calls": spread([a.ws_reads + a.ws_writes for a in accounts]),
            "worker_seconds": spread([a.busy for a in accounts]),
            "worker_cpu_seconds": spread([a.cpu for a in accounts]),
            "observe_end_seconds": spread([a.observe_end for a in accounts]),
            "reconcile_end_seconds": spread([a.reconcile_end for a in accounts]),
            "ws_calls_by_operation": dict(sorted(accounts[0].ws_calls.items())) if accounts else {},
        },
        "by_task": {
            name: {
                "runs": len(runs),
                "sql_queries": sum(t.queries for t in runs),
                "seconds": round(sum(t.seconds for t in runs), 3),
                "seconds_max": round(max(t.seconds for t in runs), 3),
                "cpu_seconds": round(sum(t.cpu for t in runs), 3),
            }
            for name, runs in sorted(tasks_by_name(r.tasks).items())
        },
        "shared": {
            "tasks": r.shared.tasks,
            "sql_queries": r.shared.queries,
            "worker_seconds": round(r.shared.busy, 3),
            "worker_cpu_seconds": round(r.shared.cpu, 3),
        },
        "locations_unobserved": r.unobserved,
        "late_accounts": r.late(
            settings.OBSERVE_INTERVAL.total_seconds(), settings.RECONCILE_INTERVAL.total_seconds()
        ),
        "cpu_seconds": r.cpu,
        "load": [round(x, 2) for x in r.load],
    }


def print_round(n: int, r: Round, workers: int) -> None:
    data = round_json(r)
    per = data["per_account"]
    observe, reconcile = (
        settings.OBSERVE_INTERVAL.total_seconds(),
        settings.RECONCILE_INTERVAL.total_seconds(),
    )
    print(f"\nround {n} ({'fills the mirror' if n == 1 else 'idle'}): load {data['load']}")
    print(f"  {'':<44} {'min':>9} {'median':>9} {'max':>9}")
    for label, key in (
        ("SQL queries per account", "sql_queries"),
        ("whitesky calls per account", "ws_calls"),
        ("worker seconds per account", "worker_seconds"),
        ("worker CPU seconds per account", "worker_cpu_seconds"),
        ("observe pass ended, s after the send", "observe_end_seconds"),
        ("reconcile pass ended, s after the send", "reconcile_end_seconds"),
    ):
        s = per[key]
        print(f"  {label:<44} {s['min']:>9} {s['median']:>9} {s['max']:>9}")
    print(
        f"  round: {data['seconds']} s from the send to the last task's end, "
        f"{data['tasks']} tasks on {workers} worker processes"
    )
    print(f"  {'task':<44} {'runs':>6} {'SQL':>8} {'seconds':>9} {'longest':>9} {'CPU s':>9}")
    for name, t in data["by_task"].items():
        print(
            f"  {name:<44} {t['runs']:>6} {t['sql_queries']:>8} {t['seconds']:>9.2f} "
            f"{t['seconds_max']:>9.2f} {t['cpu_seconds']:>9.2f}"
        )
    print(
        f"  deepest queue {data['queue_peak']}, most taken at once {data['in_flight_peak']}, "
        f"most database connections {data['db_connections_peak']}"
    )
    print(f"  host time of the round (seconds): {data['cpu_seconds']}")
    print(f"  shared tasks (fan-outs, heartbeat, ...): {data['shared']}")
    print(f"  whitesky calls of an account: {per['ws_calls_by_operation']}")
    print(
        f"  whitesky reads {data['ws_reads']}, writes {data['ws_writes']}: "
        f"{verdict(data['ws_writes'] == 0)}"
    )
    idle = verdict(data["sql_writes_unexpected"] == 0) if n > 1 else "(the mirror's first rows)"
    print(
        f"  SQL writes by table {data['sql_writes']}; beyond location stamps, heartbeat "
        f"and the checks of {r.hours_ended} hour(s) ended since the bills' "
        f"{data['sql_writes_unexpected']}: {idle}"
    )
    print(
        f"  accounts whose observe pass ended after {observe:.0f} s or reconcile pass after "
        f"{reconcile:.0f} s: {data['late_accounts']} of {len(r.accounts)}: "
        f"{verdict(data['late_accounts'] == 0)}"
    )
    print(
        f"  locations no observation ran for (expired unrun): {r.unobserved} of "
        f"{len(r.accounts) * len(LOCATIONS)}: {verdict(r.unobserved == 0)}"
    )
    print(f"  failed tasks: {len(r.failed)}: {verdict(not r.failed)}")


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--machines-per-account", type=int, default=2000)
    parser.add_argument("--gpus-per-machine", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (--concurrency)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the first fills the mirror")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a round may take")
    parser.add_argument(
        "--pgbouncer",
        action="store_true",
        help="the worker reaches PostgreSQL through a PgBouncer of its own (session pooling)",
    )
    parser.add_argument("--log-dir", type=Path, help="keep the worker's log and task costs here")
    args = parser.parse_args()
    if postgresql_missing():
        return 2
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        print("set REDIS_URL (or CELERY_BROKER_URL) to a Redis server")
        return 2

    split = machines_per_location(args.machines_per_account)
    machines = args.accounts * args.machines_per_account
    print(
        f"many accounts: {args.accounts} accounts x {len(LOCATIONS)} locations, "
        f"{args.machines_per_account} machines each ({machines} in all, "
        f"{args.gpus_per_machine} vGPU each), {args.workers} worker processes; broker "
        f"{settings.CELERY_BROKER_URL} prefix "
        f"{settings.CELERY_BROKER_TRANSPORT_OPTIONS['global_keyprefix']}; load {os.getloadavg()}",
        flush=True,
    )
    worlds = [account_world(i, split, args.gpus_per_machine) for i in range(args.accounts)]
    summary: dict[str, Any] = {
        "accounts": args.accounts,
        "locations_per_account": len(LOCATIONS),
        "machines_per_account": args.machines_per_account,
        "machines": machines,
        "gpus_per_machine": args.gpus_per_machine,
        "workers": args.workers,
        "pgbouncer": args.pgbouncer,
        "observe_interval": settings.OBSERVE_INTERVAL.total_seconds(),
        "reconcile_interval": settings.RECONCILE_INTERVAL.total_seconds(),
    }
    with throwaway_database(), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        log_dir = args.log_dir or folder
        log_dir.mkdir(parents=True, exist_ok=True)
        with simulators(worlds, folder) as sims:
            started = time.monotonic()
            seeded = [
                account_seed(i, sim, split, args.gpus_per_machine) for i, sim in enumerate(sims)
            ]
            summary["seed_seconds"] = round(time.monotonic() - started, 1)
            print(f"  seeded in {summary['seed_seconds']} s; load {os.getloadavg()}", flush=True)
            costs_file = log_dir / "task-costs.jsonl"
            costs_file.unlink(missing_ok=True)
            log = log_dir / "worker.log"
            broker_flush()
            broker = Broker()
            command = [sys.executable, "-m", "tests.bench.task_costs"]
            env = {"TASK_COSTS_FILE": str(costs_file)}
            rounds = []
            vacuum()
            try:
                with ExitStack() as stack:
                    if args.pgbouncer:
                        port = stack.enter_context(pgbouncer(folder))
                        db = connection.settings_dict
                        env["DATABASE_URL"] = (
                            f"postgres://{db['USER']}@127.0.0.1:{port}/{db['NAME']}"
                        )
                    worker = stack.enter_context(
                        celery_worker(command, folder, log, slots=args.workers, env=env, beat=False)
                    )
                    wait_for(lambda: b" ready." in log.read_bytes(), "the worker to be ready", 120)
                    cpu = CpuWatch(worker_group=worker.pid)
                    checked_until = None
                    for n in range(1, args.rounds + 1):
                        r = round_run(
                            seeded, broker, cpu, costs_file, args.timeout, checked_until, n == 2
                        )
                        rounds.append(r)
                        print_round(n, r, args.workers)
                        if n == 1:
                            checked_until = timezone.now()
                            summary["bills_backfill"] = bills_backfill(seeded)
                            vacuum()  # the mirror's first rows, as autovacuum would soon
            finally:
                broker_flush()  # this run's queue and counters: nothing reads them later
            summary["tables"] = table_facts()
            summary["max_connections"] = max_connections()
            print(f"\ndatabase after the rounds (max_connections {summary['max_connections']}):")
            print(f"  {'table':<24} {'rows':>10} {'dead':>8} {'table MiB':>10} {'index MiB':>10}")
            for name, facts in sorted(summary["tables"].items()):
                print(
                    f"  {name:<24} {facts['rows']:>10} {facts['dead']:>8} "
                    f"{facts['table_bytes'] / 2**20:>10.1f} {facts['index_bytes'] / 2**20:>10.1f}"
                )
    summary["rounds"] = [round_json(r) for r in rounds]
    print(json.dumps(summary, separators=(",", ":")))
    last = rounds[-1]
    ok = (
        last.ws_writes == 0
        and last.unexpected_writes() == 0
        and last.unobserved == 0
        and not any(r.failed for r in rounds)
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
