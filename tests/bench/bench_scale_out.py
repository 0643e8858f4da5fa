"""How fast a large scale-up converges on a real worker pool, and that it stays in bounds.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_scale_out.py [--machines 100] [--slots 8] \\
        [--create-latency 2.0] [--write-latency 0.5] [--serial-run]

It starts its own whitesky simulator (one location with enough A100 cards, one cloudspace)
that sleeps ``--create-latency`` seconds before each VM create and ``--write-latency``
before every other write, and a real Celery worker (prefork, ``--concurrency`` =
``--slots``) with beat on Redis, under this run's own key prefix, observing and
reconciling every ``--interval`` seconds. Then it scales one pool of one-GPU machines
from 0 to ``--machines`` and back to 0, and reports:

* the seconds until every machine is RUNNING with its vGPU attached in the simulator, the
  serial time (one at a time: computed, or measured on one slot with ``--serial-run``)
  and the ratio;
* whitesky calls by operation, for the scale-up and for the teardown;
* the most whitesky writes in flight at once, from the worker's log of each call (its
  end and duration): the account cap (``WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT``, set by
  ``--account-cap``) must hold;
* duplicate creates or reserves: VMs or vGPUs sharing a name in the simulator (must be 0);
* the teardown's seconds, and that the simulator bills no unassigned vGPU afterwards;
* how the worker spent its time: machine tasks run, dropped as expired, refused a slot.

Prints a table, then one JSON line with every figure. Exits 1 when a check fails or the
scale-up took longer than ``--target-seconds``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from capvco_web.integrations.whitesky import operations  # noqa: E402
from cloud.models import Account, Location  # noqa: E402
from cloud.observe import account_locations_observe  # noqa: E402
from cloud.whitesky import whitesky_client  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from simulator.whitesky import api as sim_api  # noqa: E402
from tests.bench.support import (  # noqa: E402
    celery_worker,
    postgresql_missing,
    throwaway_database,
    verdict,
    wait_for,
)
from tests.e2e.processes import broker_flush  # noqa: E402
from tests.whitesky_sim import WhiteskySimulator  # noqa: E402

LOCATION = "bench00-dc01-001"
CLOUDSPACE = "cs-bench-00"
IMAGE = 100
INSTANCES_PER_CARD = 16
GPU_TYPE = "NVIDIA A100"
CLUSTER = "scale"
POOL = "gpu"
PREFIX = f"capvco-{CLUSTER}-{POOL}-"
WHITESKY_LOGGER = "capvco_web.integrations.whitesky.transport"
# Each call the client makes, as it logs it at DEBUG once the answer came: when, how long.
CALL_LINE = re.compile(
    r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): DEBUG/(?P<process>[^\]]*)\].*?"
    r"whitesky (?P<method>[A-Z]+) (?P<op>\w+) -> (?P<status>\d+) \((?P<seconds>[\d.]+)s\)"
)
LOG_TIME = re.compile(r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}):")
TASK_DONE = re.compile(
    r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO/(?P<process>[^\]]*)\] "
    r"Task clusters\.tasks\.(?P<task>\w+)"
    r"\[[^\]]+\] succeeded in (?P<seconds>[\d.]+)s"
)


# --- the world --------------------------------------------------------------------------


def bench_world(machines: int) -> dict[str, Any]:
    """One location with A100 cards for every machine and one card to spare."""
    cards = math.ceil(machines / INSTANCES_PER_CARD) + 1
    return {
        "customer": {"customer_id": "cust-bench", "name": "Bench"},
        "currency": "EUR",
        "locations": [
            {
                "name": LOCATION,
                "account_id": 1000,
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
                        "external_network_id": 1000,
                        "name": "ext-00",
                        "cidr": "10.70.0.0/24",
                        "gateway": "10.70.0.1",
                    }
                ],
                "images": [{"image_id": IMAGE, "name": "Ubuntu 24.04"}],
                "cloudspaces": [
                    {
                        "cloudspace_id": CLOUDSPACE,
                        "name": "bench-00",
                        "private_network": "10.128.0.0/16",
                    }
                ],
            }
        ],
    }


def latency_faults(sim: WhiteskySimulator, *, create: float, write: float) -> dict[str, float]:
    """Slow the simulator down: `create` seconds before each VM create, `write` before every
    other write the client can send (reserve, attach, start, stop, delete, release...)."""
    known = {operation for _, _, operation, _ in sim_api.ROUTES}
    delays = {
        op.operation_id: create if op is operations.CREATE_VM else write
        for op in operations.ALL_OPERATIONS
        if op.method != "GET" and op.operation_id in known
    }
    for operation_id, seconds in delays.items():
        if seconds > 0:
            sim.fault(operation=operation_id, latency_ms=round(seconds * 1000))
    return delays


# --- the worker ---------------------------------------------------------------------------

# The worker runs the project's code unchanged; only the whitesky client's logger is set to
# DEBUG (before celery starts, so every pool process inherits it): its one line per call,
# with the call's duration, is how calls in flight are counted.
WORKER_MAIN = (
    "import logging, sys\n"
    f"logging.getLogger({WHITESKY_LOGGER!r}).setLevel(logging.DEBUG)\n"
    "from celery.__main__ import main\n"
    "sys.argv[0] = 'celery'\n"
    "sys.exit(main())\n"
)


# --- reading the worker's log -------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    process: str
    operation: str
    write: bool
    start: datetime
    end: datetime


def log_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f")


def logged_calls(lines: list[str]) -> list[Call]:
    """Each call's [start, end]: its log line's time less its duration. A process makes one
    call at a time, so a start is never before that process's previous end (the log's
    millisecond clock would otherwise make back-to-back calls overlap)."""
    calls = []
    previous_end: dict[str, datetime] = {}
    for line in lines:
        if match := CALL_LINE.match(line):
            end = log_time(match["at"])
            start = end - timedelta(seconds=float(match["seconds"]))
            process = match["process"]
            if process in previous_end:
                start = max(start, previous_end[process])
            previous_end[process] = end
            calls.append(
                Call(
                    process=process,
                    operation=match["op"],
                    write=match["method"] != "GET",
                    start=start,
                    end=end,
                )
            )
    return calls


def most_in_flight(calls: list[Call]) -> int:
    """The most calls whose [start, end] overlap at one moment (an end frees its place
    before a start at the same millisecond takes one)."""
    events = sorted([(c.start, 1) for c in calls] + [(c.end, -1) for c in calls])
    peak = current = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


@dataclass(frozen=True)
class TaskRun:
    process: str
    task: str
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass
class WorkerLog:
    """What the worker did within one window of time."""

    seconds: float
    slots: int
    calls: list[Call] = field(default_factory=list)
    tasks: list[TaskRun] = field(default_factory=list)
    expired: int = 0
    account_busy: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def writes_in_flight(self) -> int:
        return most_in_flight([c for c in self.calls if c.write])

    @property
    def calls_in_flight(self) -> int:
        return most_in_flight(self.calls)

    def runs(self, task: str) -> list[TaskRun]:
        return [t for t in self.tasks if t.task == task]

    @property
    def working_machine_tasks(self) -> list[TaskRun]:
        """Machine tasks that sent a whitesky write (a call of their process in their time)."""
        writes: dict[str, list[Call]] = {}
        for call in self.calls:
            if call.write:
                writes.setdefault(call.process, []).append(call)
        return [
            t
            for t in self.runs("reconcile_machine")
            if any(t.start <= c.end <= t.end for c in writes.get(t.process, []))
        ]

    @property
    def machine_work_share(self) -> float:
        """The share of the pool's time spent in machine tasks that sent writes."""
        busy = sum(t.seconds for t in self.working_machine_tasks)
        return busy / (self.slots * self.seconds) if self.seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        cluster_runs = [t.seconds for t in self.runs("reconcile_cluster")]
        return {
            "ws_writes_in_flight_max": self.writes_in_flight,
            "ws_calls_in_flight_max": self.calls_in_flight,
            "machine_tasks_run": len(self.runs("reconcile_machine")),
            "machine_tasks_working": len(self.working_machine_tasks),
            "machine_tasks_expired": self.expired,
            "machine_tasks_account_busy": self.account_busy,
            "pool_share_machine_work": round(self.machine_work_share, 3),
            "cluster_tasks_run": len(cluster_runs),
            "cluster_task_seconds_max": round(max(cluster_runs, default=0.0), 2),
            "worker_errors": len(self.errors),
        }


def worker_log_window(log: Path, start: datetime, end: datetime, slots: int) -> WorkerLog:
    lines = []
    at: datetime | None = None
    for line in log.read_text(errors="replace").splitlines():
        if match := LOG_TIME.match(line):
            at = log_time(match["at"])
        if at is not None and start <= at <= end:
            lines.append(line)
    result = WorkerLog(
        seconds=(end - start).total_seconds(), slots=slots, calls=logged_calls(lines)
    )
    for line in lines:
        if match := TASK_DONE.match(line):
            done = log_time(match["at"])
            result.tasks.append(
                TaskRun(
                    process=match["process"],
                    task=match["task"],
                    start=done - timedelta(seconds=float(match["seconds"])),
                    end=done,
                )
            )
        elif "Discarding revoked task: clusters.tasks.reconcile_machine" in line:
            result.expired += 1
        elif "account busy" in line:
            result.account_busy += 1
        elif "ERROR/" in line or "Traceback" in line:
            result.errors.append(line)
    return result


# --- the control plane ------------------------------------------------------------------


@dataclass
class Plane:
    sim: WhiteskySimulator
    account: Account
    pool: MachinePool


def fresh_plane(sim: WhiteskySimulator, world: dict[str, Any], args: argparse.Namespace) -> Plane:
    """An empty database and simulator, a slow simulator, one cluster with an empty pool."""
    call_command("flush", interactive=False, verbosity=0)
    sim.reset(world)
    latency_faults(sim, create=args.create_latency, write=args.write_latency)
    account = Account.objects.create(
        name="bench",
        api_url=sim.api_url,
        iam_url=sim.iam_url,
        customer_id=sim.customer_id,
        credential=sim.token(),
    )
    with whitesky_client(account) as client:
        account_locations_observe(client=client, account=account)
    cluster = Cluster.objects.create(name=CLUSTER, account=account)
    site = ClusterSite.objects.create(
        cluster=cluster,
        location=Location.objects.get(account=account, name=LOCATION),
        cloudspace_id=CLOUDSPACE,
        image_id=IMAGE,
    )
    pool = MachinePool.objects.create(
        cluster=cluster, site=site, name=POOL, replicas=0, gpu_type=GPU_TYPE, gpu_count=1
    )
    return Plane(sim=sim, account=account, pool=pool)


def ours(rows: list[dict[str, Any]], name_key: str) -> list[dict[str, Any]]:
    return [row for row in rows if str(row[name_key]).startswith(PREFIX)]


def duplicates(rows: list[dict[str, Any]], name_key: str) -> int:
    """Rows beyond the first per name, deleted ones included: a second create or reserve."""
    counts = Counter(str(row[name_key]) for row in rows)
    return sum(n - 1 for n in counts.values())


def billed_unassigned(vgpus: list[dict[str, Any]]) -> int:
    """vGPUs whose billing runs with no VM: an open segment without a VM."""
    return sum(
        1 for v in vgpus if v["segments"] and v["segments"][-1]["end"] is None and not v["vm_id"]
    )


@dataclass
class Progress:
    """When the count of converged machines passed each quarter of the target."""

    total: int
    started: float
    marks: dict[str, float] = field(default_factory=dict)
    last_print: float = 0.0

    def see(self, done: int, label: str) -> None:
        now = time.monotonic()
        for quarter in (25, 50, 75, 100):
            key = f"{quarter}%"
            if key not in self.marks and done * 100 >= quarter * self.total:
                self.marks[key] = round(now - self.started, 1)
        if now - self.last_print >= 10:
            self.last_print = now
            print(f"    {now - self.started:6.1f} s: {label} {done}/{self.total}", flush=True)


# --- one run: 0 → N → 0 on a worker with `slots` processes --------------------------------


@dataclass
class Run:
    slots: int
    machines: int
    up_seconds: float = 0.0
    up_marks: dict[str, float] = field(default_factory=dict)
    up_calls: Counter[str] = field(default_factory=Counter)
    up_log: WorkerLog = field(default_factory=lambda: WorkerLog(seconds=0, slots=1))
    running_vms: int = 0
    attached_vgpus: int = 0
    duplicate_vms: int = 0
    duplicate_vgpus: int = 0
    down_seconds: float = 0.0
    down_calls: Counter[str] = field(default_factory=Counter)
    down_log: WorkerLog = field(default_factory=lambda: WorkerLog(seconds=0, slots=1))
    live_vms_after: int = 0
    live_vgpus_after: int = 0
    unassigned_billed_after: int = 0

    @property
    def clean_after(self) -> bool:
        return not (self.live_vms_after or self.live_vgpus_after or self.unassigned_billed_after)

    def as_json(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "machines": self.machines,
            "up_seconds": round(self.up_seconds, 1),
            "up_marks": self.up_marks,
            "up_calls": dict(sorted(self.up_calls.items())),
            "up_worker": self.up_log.as_json(),
            "running_vms": self.running_vms,
            "attached_vgpus": self.attached_vgpus,
            "duplicate_vms": self.duplicate_vms,
            "duplicate_vgpus": self.duplicate_vgpus,
            "down_seconds": round(self.down_seconds, 1),
            "down_calls": dict(sorted(self.down_calls.items())),
            "down_worker": self.down_log.as_json(),
            "live_vms_after": self.live_vms_after,
            "live_vgpus_after": self.live_vgpus_after,
            "unassigned_billed_after": self.unassigned_billed_after,
        }


def scale_run(
    sim: WhiteskySimulator,
    world: dict[str, Any],
    args: argparse.Namespace,
    *,
    slots: int,
    folder: Path,
    log_dir: Path,
    timeout: float,
) -> Run:
    plane = fresh_plane(sim, world, args)
    n = args.machines
    run = Run(slots=slots, machines=n)
    env = {
        "OBSERVE_INTERVAL_SECONDS": str(args.interval),
        "RECONCILE_INTERVAL_SECONDS": str(args.interval),
        "ORPHAN_SWEEP_INTERVAL_SECONDS": "60",
        "WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT": str(args.account_cap),
    }
    log = log_dir / f"worker-{slots}-slots.log"
    broker_flush()
    with celery_worker([sys.executable, "-c", WORKER_MAIN], folder, log, slots=slots, env=env):
        location = Location.objects.get(account=plane.account, name=LOCATION)
        wait_for(
            lambda: Location.objects.filter(
                pk=location.pk, observation_started_at__isnull=False, observation_complete=True
            ).exists(),
            "the worker's first observe of the location",
            60,
        )

        # 0 → N
        print(f"  {slots} slot(s): scaling {POOL} 0 -> {n} ...", flush=True)
        sim.clear_calls()
        up_from = datetime.now()
        started = time.monotonic()
        MachinePool.objects.filter(pk=plane.pool.pk).update(replicas=n)
        progress = Progress(total=n, started=started)
        running = Machine.objects.filter(pool=plane.pool, phase=Machine.Phase.RUNNING)

        def converged() -> bool:
            done = running.count()
            progress.see(done, "running")
            if done < n:
                return False
            state = sim.state()
            vms = [v for v in ours(state["vms"], "name") if v["status"] == "RUNNING"]
            attached = [v for v in ours(state["vgpus"], "vgpu_name") if v["vm_id"]]
            return len(vms) == n and len(attached) == n

        wait_for(converged, f"{n} running machines with their vGPUs", timeout)
        run.up_seconds = time.monotonic() - started
        run.up_marks = progress.marks
        run.up_calls = Counter(str(c["operation"]) for c in sim.calls()["calls"])
        state = sim.state()
        vms, vgpus = ours(state["vms"], "name"), ours(state["vgpus"], "vgpu_name")
        run.running_vms = sum(1 for v in vms if v["status"] == "RUNNING")
        run.attached_vgpus = sum(1 for v in vgpus if v["vm_id"] and v["status"] != "DESTROYED")
        run.duplicate_vms = duplicates(vms, "name")
        run.duplicate_vgpus = duplicates(vgpus, "vgpu_name")
        up_to = datetime.now()

        # N → 0
        print(f"  {slots} slot(s): scaling {POOL} {n} -> 0 ...", flush=True)
        sim.clear_calls()
        started = time.monotonic()
        MachinePool.objects.filter(pk=plane.pool.pk).update(replicas=0)
        progress = Progress(total=n, started=started)
        left = Machine.objects.filter(pool=plane.pool)

        def gone() -> bool:
            remaining = left.count()
            progress.see(n - remaining, "torn down")
            if remaining:
                return False
            state = sim.state()
            return not any(
                v["status"] != "DESTROYED" for v in ours(state["vgpus"], "vgpu_name")
            ) and not any(v["status"] != "DESTROYED" for v in ours(state["vms"], "name"))

        wait_for(gone, "the pool's teardown", timeout)
        run.down_seconds = time.monotonic() - started
        run.down_calls = Counter(str(c["operation"]) for c in sim.calls()["calls"])
        state = sim.state()
        vms, vgpus = ours(state["vms"], "name"), ours(state["vgpus"], "vgpu_name")
        run.live_vms_after = sum(1 for v in vms if v["status"] != "DESTROYED")
        run.live_vgpus_after = sum(1 for v in vgpus if v["status"] != "DESTROYED")
        run.unassigned_billed_after = billed_unassigned(state["vgpus"])
        down_to = datetime.now()
    run.up_log = worker_log_window(log, up_from, up_to, slots)
    run.down_log = worker_log_window(log, up_to, down_to, slots)
    return run


# --- reporting ----------------------------------------------------------------------------


def print_calls(title: str, calls: Counter[str]) -> None:
    print(f"  {title}")
    for op in sorted(calls):
        print(f"    {op:<34} {calls[op]:>6}")


def print_run(run: Run, cap: int) -> None:
    up, down = run.up_log, run.down_log
    print(f"\n{run.slots} slot(s), {run.machines} machines")
    print(f"  {'':<44} {'0 -> N':>10} {'N -> 0':>10}")
    rows: list[tuple[str, object, object]] = [
        ("seconds", f"{run.up_seconds:.1f}", f"{run.down_seconds:.1f}"),
        ("whitesky writes", sum_writes(run.up_calls), sum_writes(run.down_calls)),
        ("whitesky reads", sum_reads(run.up_calls), sum_reads(run.down_calls)),
        ("most whitesky writes in flight at once", up.writes_in_flight, down.writes_in_flight),
        ("most whitesky calls in flight at once", up.calls_in_flight, down.calls_in_flight),
        ("machine tasks run", *(len(w.runs("reconcile_machine")) for w in (up, down))),
        ("  of which sent whitesky writes", *(len(w.working_machine_tasks) for w in (up, down))),
        ("machine tasks dropped as expired", up.expired, down.expired),
        ("machine tasks refused a slot (account busy)", up.account_busy, down.account_busy),
        (
            "pool time in machine tasks that wrote",
            *(f"{w.machine_work_share:.0%}" for w in (up, down)),
        ),
        (
            "cluster tasks run (plan + fan-out)",
            *(len(w.runs("reconcile_cluster")) for w in (up, down)),
        ),
        (
            "  longest, seconds",
            *(f"{w.as_json()['cluster_task_seconds_max']:.1f}" for w in (up, down)),
        ),
        ("worker errors", len(up.errors), len(down.errors)),
    ]
    for label, a, b in rows:
        print(f"  {label:<44} {a!s:>10} {b!s:>10}")
    print(f"  converged machines by time (0 -> N): {run.up_marks}")
    print_calls("whitesky calls of the scale-up, by operationId:", run.up_calls)
    print_calls("whitesky calls of the teardown, by operationId:", run.down_calls)
    print(
        f"  running VMs {run.running_vms}, attached vGPUs {run.attached_vgpus}; "
        f"duplicate VMs {run.duplicate_vms}, duplicate vGPUs {run.duplicate_vgpus}: "
        f"{verdict(run.duplicate_vms == 0 and run.duplicate_vgpus == 0)}"
    )
    cap_ok = max(up.writes_in_flight, down.writes_in_flight) <= cap
    print(f"  writes in flight <= account cap {cap}: {verdict(cap_ok)}")
    print(
        f"  after teardown: live VMs {run.live_vms_after}, live vGPUs {run.live_vgpus_after}, "
        f"vGPUs billed unassigned {run.unassigned_billed_after}: {verdict(run.clean_after)}"
    )
    for line in (up.errors + down.errors)[:5]:
        print(f"  worker: {line}")


def sum_writes(calls: Counter[str]) -> int:
    return sum(n for op, n in calls.items() if op in WRITE_OPERATIONS)


def sum_reads(calls: Counter[str]) -> int:
    return sum(n for op, n in calls.items() if op not in WRITE_OPERATIONS)


WRITE_OPERATIONS = frozenset(
    op.operation_id for op in operations.ALL_OPERATIONS if op.method != "GET"
)


def run_ok(run: Run, cap: int) -> bool:
    return (
        run.running_vms == run.machines
        and run.attached_vgpus == run.machines
        and run.duplicate_vms == 0
        and run.duplicate_vgpus == 0
        and max(run.up_log.writes_in_flight, run.down_log.writes_in_flight) <= cap
        and run.clean_after
    )


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", type=int, default=100, help="machines to scale up to")
    parser.add_argument("--slots", type=int, default=8, help="worker processes (--concurrency)")
    parser.add_argument(
        "--account-cap",
        type=int,
        default=settings.WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT,
        help="WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT of the worker",
    )
    parser.add_argument("--create-latency", type=float, default=2.0, help="seconds per VM create")
    parser.add_argument(
        "--write-latency", type=float, default=0.5, help="seconds per other whitesky write"
    )
    parser.add_argument(
        "--interval", type=float, default=3.0, help="observe and reconcile interval, seconds"
    )
    parser.add_argument(
        "--serial-run",
        action="store_true",
        help="also measure the scale-up on one slot (else the serial time is computed)",
    )
    parser.add_argument(
        "--log-dir", type=Path, help="keep the worker's logs here (else they are removed)"
    )
    parser.add_argument(
        "--target-seconds", type=float, default=120.0, help="the scale-up must converge within"
    )
    args = parser.parse_args()
    if postgresql_missing():
        return 2
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        print("set REDIS_URL (or CELERY_BROKER_URL) to a Redis server: beat needs a broker")
        return 2

    n = args.machines
    # One machine, one at a time: create the VM, reserve and attach its vGPU, start it.
    per_machine = args.create_latency + 2 * args.write_latency
    serial_computed = n * per_machine
    timeout = 3 * serial_computed + 120  # one slot also plans and observes between machines
    world = bench_world(n)
    print(
        f"scale-out: {n} one-GPU machines, {args.slots} slots, account cap {args.account_cap}, "
        f"create {args.create_latency} s, other writes {args.write_latency} s, "
        f"interval {args.interval} s; broker {settings.CELERY_BROKER_URL} "
        f"prefix {settings.CELERY_BROKER_TRANSPORT_OPTIONS['global_keyprefix']}",
        flush=True,
    )

    with throwaway_database(), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        log_dir = args.log_dir or folder
        log_dir.mkdir(parents=True, exist_ok=True)
        world_file = folder / "world.json"
        world_file.write_text(json.dumps(world))
        with WhiteskySimulator(world=world_file) as sim:
            try:
                parallel = scale_run(
                    sim,
                    world,
                    args,
                    slots=args.slots,
                    folder=folder,
                    log_dir=log_dir,
                    timeout=timeout,
                )
                serial = (
                    scale_run(
                        sim,
                        world,
                        args,
                        slots=1,
                        folder=folder,
                        log_dir=log_dir,
                        timeout=timeout,
                    )
                    if args.serial_run
                    else None
                )
            except TimeoutError:
                for log in sorted(log_dir.glob("worker-*.log")):
                    print(f"--- {log.name} (tail)\n{log.read_text()[-6000:]}")
                raise

    print_run(parallel, args.account_cap)
    if serial is not None:
        print_run(serial, args.account_cap)
    serial_seconds = serial.up_seconds if serial is not None else serial_computed
    ratio = serial_seconds / parallel.up_seconds
    on_target = parallel.up_seconds <= args.target_seconds
    print(
        f"\nscale-up 0 -> {n}: {parallel.up_seconds:.1f} s on {args.slots} slots; one at a "
        f"time {serial_seconds:.1f} s ({'measured on 1 slot' if serial else 'computed'}; "
        f"{n} x {per_machine:.1f} s = {serial_computed:.0f} s of latency): {ratio:.1f}x faster"
    )
    print(f"within {args.target_seconds:.0f} s: {verdict(on_target)}")
    summary = {
        "machines": n,
        "slots": args.slots,
        "account_cap": args.account_cap,
        "create_latency": args.create_latency,
        "write_latency": args.write_latency,
        "interval": args.interval,
        "parallel": parallel.as_json(),
        "serial": serial.as_json() if serial is not None else None,
        "serial_computed_seconds": round(serial_computed, 1),
        "speedup": round(ratio, 2),
        "target_seconds": args.target_seconds,
        "on_target": on_target,
    }
    print(json.dumps(summary, separators=(",", ":")))
    ok = on_target and run_ok(parallel, args.account_cap)
    if serial is not None:
        ok = ok and run_ok(serial, args.account_cap)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
