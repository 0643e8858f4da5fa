"""What an SR-IOV ADD costs through the agent API, one at a time and 100 at once.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_sriov.py [--vms 10] [--serial 50] \\
        [--concurrent 100] [--workers 2] [--threads 8] [--celery 4] [--port 18765] \\
        [--burst-pods new|mirrored]

It starts the whitesky simulator, the fake Kubernetes API, gunicorn serving the control
plane (``--workers`` processes of ``--threads`` threads) and a Celery worker (``--celery``
processes: what runs the VMs' NIC queues; 4 by default, the WORKER_CONCURRENCY of
deploy/kubernetes/worker.yaml), builds cluster `demo` with ``--vms`` running
machines whose nodes joined, SR-IOV on (its network widened to hold ``--concurrent``
NICs at once), and calls the agent API over HTTP as the CNI plugin does (ADD; while it
answers 202, GET the request after the wait each answer asks for: its `retry_after_ms`,
else Retry-After):

1. ``--serial`` ADDs one after the other, each for a pod scheduled a moment before (not
   in the mirror yet: the agent asks Kubernetes; the nodes are mirrored), spread over the
   VMs; then their DELs;
2. ``--concurrent`` ADDs at once, spread evenly over the VMs: of pods new to the mirror
   (read from Kubernetes, as the serial ones), or with ``--burst-pods mirrored`` of pods
   the mirror holds already (as the watch has them a moment after they are scheduled,
   before their sandbox's ADD).

Latency is from the ADD until the NIC is answered (polls included); `add_request` is the
first answer's round trip alone (what holds a web thread). `listings_per_add` counts the
simulator's NIC listings per serial ADD. Checks: every ADD answered a NIC, NICs are
distinct, the simulator holds exactly those, and no two attaches of one VM overlapped.

Prints a table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

import requests  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402

from kube.client import kube_client  # noqa: E402
from kube.observe import cluster_kube_observe  # noqa: E402
from simulator.whitesky.worldfile import DEMO_WORLD  # noqa: E402
from sriov.models import PodNic  # noqa: E402
from tests.kube_sim import KubeSimulator  # noqa: E402
from tests.servers import free_port  # noqa: E402
from tests.sriov.support import NETWORK, World, world_build  # noqa: E402
from tests.whitesky_sim import PROJECT_ROOT, WhiteskySimulator  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def figures(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 1),
        "p95_ms": round(percentile(values, 95) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
        "mean_ms": round(statistics.fmean(values) * 1000, 1),
    }


class Gunicorn:
    def __init__(self, *, workers: int, threads: int, port: int = 18765) -> None:
        self.url = f"http://127.0.0.1:{port}"
        database = connection.settings_dict
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": (
                f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/"
                f"{database['NAME']}"
            ),
        }
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn", "capvco_web.wsgi", "--bind",
                f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads),
                "--no-control-socket", "--log-level", "warning", "--timeout", "120",
            ],
            cwd=PROJECT_ROOT,
            env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(f"{self.url}/healthz", timeout=10)
                return
            except requests.RequestException:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("gunicorn did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:  # a loaded machine: its graceful stop is slow
                self.process.kill()
                self.process.wait(20)


def world_holding(nics: int, folder: Path) -> Path:
    """The demo world with its SR-IOV network wide enough for `nics` NICs at once (the
    simulator hands out its 11th to its last but one address: a /24 holds 245), written
    into `folder`."""
    world = json.loads(DEMO_WORLD.read_text())
    for location in world["locations"]:
        for network in location.get("external_networks", []):
            if network.get("name") != NETWORK:
                continue
            cidr = ipaddress.IPv4Network(network["cidr"])
            prefix = cidr.prefixlen
            while prefix > 8 and 2 ** (32 - prefix) - 11 < nics:
                prefix -= 1
            network["cidr"] = str(cidr.supernet(new_prefix=prefix))
    path = folder / "world.json"
    path.write_text(json.dumps(world))
    return path


class Added:
    """One ADD: until the NIC was answered, the first answer's round trip, the polls
    (GETs) it took, and when (wall clock) the NIC was answered."""

    def __init__(self, took: float, first: float, polls: int, answered_at: float) -> None:
        self.took, self.first, self.polls, self.answered_at = took, first, polls, answered_at


def add(session: requests.Session, url: str, world: World, name: str, node: int) -> Added:
    """The time until the NIC was answered, and the first answer's round trip."""
    pod = world.pods[name]["metadata"]
    body = {
        "pod_uid": pod["uid"],
        "namespace": pod["namespace"],
        "pod_name": name,
        "node_name": world.node(node),
        "container_id": f"sandbox-{name}",
        "ifname": "net1",
    }
    headers = {"Authorization": f"Bearer {world.node_tokens[node]}"}  # each node its own
    started = time.perf_counter()
    response = session.post(
        f"{url}/api/v1/sriov/agent/nics/", json=body, headers=headers, timeout=120
    )
    first = time.perf_counter() - started
    key = {"container_id": body["container_id"], "ifname": "net1"}
    deadline = time.monotonic() + 120
    polls = 0
    while response.status_code == 202 and time.monotonic() < deadline:
        polls += 1
        hint = response.json().get("retry_after_ms")
        time.sleep(
            min(max(hint / 1000, 0.05), 10.0)
            if isinstance(hint, int)
            else float(response.headers.get("Retry-After", "1"))
        )
        # A connection of its own, as the plugin makes each call (a kept-alive one may be
        # closed by the server while the poll waits).
        response = requests.get(
            f"{url}/api/v1/sriov/agent/nics/{pod['uid']}/",
            params=key,
            headers=headers,
            timeout=120,
        )
    took = time.perf_counter() - started
    answered_at = time.time()
    if response.status_code != 200 or response.json().get("state") != "attached":
        try:
            answer = response.json()
        except ValueError:
            answer = {"detail": response.text}
        why = {k: answer.get(k) for k in ("state", "failure_code", "failure", "code", "detail")}
        raise RuntimeError(f"ADD {name}: {response.status_code} {why}")
    return Added(took, first, polls, answered_at)


class Worker:
    """A Celery worker (prefork, `concurrency` processes) on the bench's database."""

    def __init__(self, *, concurrency: int) -> None:
        database = connection.settings_dict
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": (
                f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/"
                f"{database['NAME']}"
            ),
        }
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "capvco_web", "worker", "--concurrency",
                str(concurrency), "--loglevel", "WARNING", "--without-mingle",
                "--without-gossip",
            ],
            cwd=PROJECT_ROOT,
            env=env,
        )  # fmt: skip

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(20)


def session_for(world: World) -> requests.Session:
    return requests.Session()


def overlaps() -> int:
    """Pairs of attaches of one VM whose [attach sent, NIC found] overlap."""
    per_vm: dict[int, list[PodNic]] = defaultdict(list)
    for row in PodNic.objects.exclude(attached_at=None).order_by("attach_started_at"):
        per_vm[row.vm_id].append(row)
    found = 0
    for rows in per_vm.values():
        for before, after in itertools.pairwise(rows):
            if after.attach_started_at < before.attached_at:  # type: ignore[operator]
                found += 1
    return found


def burst_stages(rows: Any, answered: dict[str, float]) -> dict[str, Any]:
    """Where a burst ADD's time went, from its row: queued until its VM's turn
    (`requested_at` → `attach_started_at`), the attach (→ `attached_at`), and the poll
    that answered it after that; and the most VMs attaching at one moment."""
    waited, attaching, lag = [], [], []
    spans: list[tuple[float, int]] = []
    for row in rows:
        if row.attach_started_at is None or row.attached_at is None:
            continue
        began, done = row.attach_started_at.timestamp(), row.attached_at.timestamp()
        waited.append(began - row.requested_at.timestamp())
        attaching.append(done - began)
        if row.pod_name in answered:
            lag.append(max(0.0, answered[row.pod_name] - done))
        spans += [(began, 1), (done, -1)]
    at_once = peak = 0
    for _, step in sorted(spans):
        at_once += step
        peak = max(peak, at_once)
    return {
        "burst_queue_wait": figures(waited),
        "burst_attach": figures(attaching),
        "burst_poll_lag": figures(lag),
        "burst_vms_attaching_at_once": peak,
    }


def run(world: World, url: str, args: argparse.Namespace) -> dict[str, Any]:
    vms = args.vms
    for v in range(vms):
        world.node_token(v)
    # 1. One at a time.
    session = session_for(world)
    serial: list[float] = []
    requests_only: list[float] = []
    listings: list[int] = []
    for i in range(args.serial):
        name = f"serial-{i}"
        world.pod(name, node=i % vms)
        world.sim.clear_calls()
        done = add(session, url, world, name, i % vms)
        took, first = done.took, done.first
        listings.append(
            sum(
                1
                for call in world.sim.calls()["calls"]
                if call["operation"] == "listExternalNetworksVirtualMachine"
            )
        )
        serial.append(took)
        requests_only.append(first)
    dels: list[float] = []
    for i in range(args.serial):
        uid = world.uid(f"serial-{i}")
        started = time.perf_counter()
        where = f"{url}/api/v1/sriov/agent/nics/{uid}/"
        headers = {"Authorization": f"Bearer {world.node_tokens[i % vms]}"}
        params = {"container_id": f"sandbox-serial-{i}", "ifname": "net1"}
        response = session.delete(where, headers=headers, params=params, timeout=60)
        # Queued on the VM (202): polled, as the plugin does, until released (404).
        while response.status_code == 202:
            time.sleep(response.json()["retry_after_ms"] / 1000)
            response = session.get(where, headers=headers, params=params, timeout=60)
        dels.append(time.perf_counter() - started)
        assert response.status_code in (204, 404), response.text
    serial_nics_left = sum(len(world.sim_nics(world.vm(v))) for v in range(vms))

    # 2. All at once, spread evenly over the VMs.
    names = [f"burst-{i}" for i in range(args.concurrent)]
    for i, name in enumerate(names):
        world.pod(name, node=i % vms)
    if args.burst_pods == "mirrored":
        with kube_client(world.cluster) as client:
            cluster_kube_observe(client=client, cluster=world.cluster)
    latencies: list[float] = [0.0] * len(names)
    firsts: list[float] = [0.0] * len(names)
    polls: list[int] = [0] * len(names)
    answered: dict[str, float] = {}
    errors: list[str] = []
    start = threading.Barrier(len(names) + 1)

    def one(i: int) -> None:
        local = session_for(world)
        start.wait()
        try:
            done = add(local, url, world, names[i], i % vms)
            latencies[i], firsts[i], polls[i] = done.took, done.first, done.polls
            answered[names[i]] = done.answered_at
        except Exception as exc:
            errors.append(str(exc)[:200])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(names))]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join(600)
    wall = time.perf_counter() - began
    rows = PodNic.objects.filter(pod_name__startswith="burst-", state=PodNic.State.ATTACHED)
    macs = set(rows.values_list("mac", flat=True))
    on_vms = sorted(n["mac_address"] for v in range(vms) for n in world.sim_nics(world.vm(v)))
    per_vm = sorted(rows.values_list("vm_id", flat=True))
    stages = burst_stages(rows, answered)
    checks = {
        "every_add_answered": not errors,
        "distinct_nics": len(macs) == len(names),
        "simulator_holds_exactly_those": on_vms == sorted(macs),
        "even_over_vms": len(set(per_vm)) == vms,
        "no_overlapping_attach_per_vm": overlaps() == 0,
        "serial_dels_left_nothing": serial_nics_left == 0,
    }
    return {
        "vms": vms,
        "server": f"gunicorn {args.workers} workers x {args.threads} threads",
        "celery": f"{args.celery} worker processes",
        "burst_pods": args.burst_pods,
        "serial_add": figures(serial),
        "serial_add_request": figures(requests_only),
        "listings_per_add": {"max": max(listings), "mean": round(statistics.fmean(listings), 2)},
        "serial_del": figures(dels),
        "concurrent_add": {**figures([x for x in latencies if x]), "wall_s": round(wall, 2)},
        "concurrent_add_request": figures([x for x in firsts if x]),
        "concurrent_polls_per_add": {"max": max(polls), "mean": round(statistics.fmean(polls), 2)},
        **stages,
        # One VM's ADDs one after another, at the serial p50: what the burst cannot beat.
        "per_vm_serial_floor_s": round(percentile(serial, 50) * len(names) / vms, 2),
        "errors": errors[:5],
        "checks": checks,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vms", type=int, default=10)
    parser.add_argument("--serial", type=int, default=50)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--celery", type=int, default=4)  # deploy/kubernetes/worker.yaml
    parser.add_argument("--port", type=int, default=0, help="gunicorn's port (0: a free one)")
    parser.add_argument(
        "--burst-pods",
        choices=["new", "mirrored"],
        default="new",
        help="the burst's pods new to the mirror (read from Kubernetes) or mirrored",
    )
    args = parser.parse_args()
    args.port = args.port or free_port()
    if connection.vendor != "postgresql":
        print("needs PostgreSQL (DATABASE_URL)", file=sys.stderr)
        return 2
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        with (
            tempfile.TemporaryDirectory() as folder,
            WhiteskySimulator(world=world_holding(args.concurrent, Path(folder))) as sim,
            KubeSimulator() as kube,
        ):
            world = world_build(sim, kube, vms=args.vms)
            # The nodes joined long ago (mirrored); each pod is new (read from Kubernetes).
            with kube_client(world.cluster) as client:
                cluster_kube_observe(client=client, cluster=world.cluster)
            server = Gunicorn(workers=args.workers, threads=args.threads, port=args.port)
            worker = Worker(concurrency=args.celery)
            try:
                summary = run(world, server.url, args)
            finally:
                worker.stop()
                server.stop()
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
    for name in (
        "serial_add", "serial_add_request", "listings_per_add", "serial_del", "concurrent_add",
        "concurrent_add_request", "concurrent_polls_per_add", "burst_queue_wait",
        "burst_attach", "burst_poll_lag", "burst_vms_attaching_at_once",
        "per_vm_serial_floor_s",
    ):  # fmt: skip
        print(f"{name:27} {summary[name]}")
    print(f"checks           {summary['checks']}")
    print(json.dumps(summary, separators=(",", ":")))
    return 0 if all(summary["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
