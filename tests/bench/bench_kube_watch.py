"""What keeping one cluster's nodes and pods mirrored costs per minute: the beat pass that
lists everything every OBSERVE_INTERVAL, against the watch process (list once, then watch)
beside the same beat pass, which then lists nothing.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_kube_watch.py [--nodes 500] [--pods-per-node 20] \\
        [--changes-per-minute 6] [--minutes 1]

One cluster as tests/bench/bench_kube_observe.py seeds it (``--nodes`` joined nodes, each
with ``--pods-per-node`` pods). Over ``--minutes`` of wall time, ``--changes-per-minute``
changes come evenly spread (in turn: a pod created, a pod's phase changed, a pod deleted),
in each mode:

1. beat: the observe pass every OBSERVE_INTERVAL (30 s), as beat runs it;
2. watch: the watch process's two threads (nodes, pods) running, and the same beat pass,
   which skips both listings while the watch stamps are fresh. The watch's first listing
   is counted apart (it is made once per process start and per KUBE_RESYNC_SECONDS).

Counted: list calls (requests of listings, pages included) and watch requests from the
fake API's request log, SQL writes (INSERT, UPDATE, DELETE) of every thread, and in watch
mode how long each change took to show in the mirror. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.db.backends.signals import connection_created  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402

from clusters.models import Cluster  # noqa: E402
from gpus import naming  # noqa: E402
from kube.client import kube_client  # noqa: E402
from kube.models import KubePod, KubeWatch  # noqa: E402
from kube.observe import cluster_kube_observe  # noqa: E402
from kube.watch import KubeWatcher  # noqa: E402
from tests.bench.bench_kube_observe import seed  # noqa: E402
from tests.kube_sim import KubeSimulator, pod_object  # noqa: E402

CLUSTER = "bench00"
SQL_WRITES = ("INSERT", "UPDATE", "DELETE")


class WriteCounter:
    """SQL writes of every connection, of every thread (installed as each one opens)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writes = 0
        self.queries = 0
        self.local = threading.local()  # `off`: the benchmark's own reads, not counted

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if not getattr(self.local, "off", False):
            with self.lock:
                self.queries += 1
                self.writes += sql.lstrip().upper().startswith(SQL_WRITES)
        return execute(sql, params, many, context)

    def uncounted(self, check: Callable[[], bool]) -> bool:
        self.local.off = True
        try:
            return check()
        finally:
            self.local.off = False

    def take(self) -> tuple[int, int]:
        with self.lock:
            found = (self.writes, self.queries)
            self.writes = self.queries = 0
        return found


COUNTER = WriteCounter()


def _install(sender: Any, connection: Any, **kwargs: Any) -> None:
    if COUNTER not in connection.execute_wrappers:
        connection.execute_wrappers.append(COUNTER)


@dataclass
class Minute:
    mode: str
    seconds: float = 0.0
    list_calls: int = 0
    watch_requests: int = 0
    sql_writes: int = 0
    queries: int = 0
    changes: int = 0
    beat_passes: int = 0
    beat_seconds: float = 0.0
    """Time spent in the beat passes of the window, together."""
    mirrored: bool = True
    latencies: list[float] = field(default_factory=list)

    def per_minute(self, value: float) -> float:
        return value * 60 / self.seconds if self.seconds else 0.0


def sim_counts(sim: KubeSimulator) -> tuple[int, int]:
    calls = sim.calls(CLUSTER)
    lists = sum(1 for c in calls if str(c["operation"]).startswith("list "))
    watches = sum(1 for c in calls if str(c["operation"]).startswith("watch "))
    return lists, watches


def beat_pass() -> None:
    cluster = Cluster.objects.get(name=CLUSTER)
    with kube_client(cluster) as client:
        cluster_kube_observe(client=client, cluster=cluster)


def timed(action: Callable[[], None]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


class Changes:
    """The changes, in turn: a pod created, a pod's phase changed, a pod deleted."""

    def __init__(self, sim: KubeSimulator, pods_per_node: int) -> None:
        self.sim = sim
        self.count = 0
        self.per_node = max(pods_per_node - 1, 1)  # pod 0 of each node (its GPU) left alone
        self.cluster = Cluster.objects.get(name=CLUSTER)

    def make(self) -> Callable[[], bool]:
        """Make the next change; answers a check that the mirror shows it."""
        n, self.count = self.count, self.count + 1
        with kube_client(self.cluster) as client:
            core = client._core  # the official client, as another actor would use it
            # Seeded pods, each changed once: a phase changed, another deleted.
            node, index = divmod(2 * (n // 3) + (n % 3 == 2), self.per_node)
            node_name = naming.vm_name(CLUSTER, f"gpu-{node}")
            if n % 3 == 0:
                name = f"new-{n}"
                self.sim.put(CLUSTER, pod_object(name, namespace="team-0", node=node_name))
                return lambda: KubePod.objects.filter(name=name).exists()
            victim, namespace = f"{node_name}-pod-{index + 1}", f"team-{(index + 1) % 4}"
            if n % 3 == 1:
                core.patch_namespaced_pod_status(
                    victim, namespace, {"status": {"phase": "Succeeded"}}
                )
                return lambda: KubePod.objects.filter(name=victim, phase="Succeeded").exists()
            core.delete_namespaced_pod(victim, namespace)
            return lambda: not KubePod.objects.filter(name=victim).exists()


def window(
    sim: KubeSimulator,
    changes: Changes,
    mode: str,
    seconds: float,
    changes_per_minute: int,
) -> Minute:
    """`seconds` of wall time: the beat pass every OBSERVE_INTERVAL, the changes spread."""
    interval = settings.OBSERVE_INTERVAL.total_seconds()
    total = max(1, round(changes_per_minute * seconds / 60))
    change_every = seconds / total
    m = Minute(mode)
    pending: list[tuple[float, Callable[[], bool]]] = []
    beat_pass()  # uncounted: the window's passes are those at its interval's ends
    sim.clear_calls()
    COUNTER.take()
    began = time.monotonic()
    next_beat, next_change = began + interval, began + change_every / 2
    while (now := time.monotonic()) < began + seconds:
        if now >= next_beat:
            m.beat_seconds += timed(beat_pass)
            m.beat_passes += 1
            next_beat += interval
        if now >= next_change and m.changes < total:
            pending.append((time.monotonic(), changes.make()))
            m.changes += 1
            next_change += change_every
        for made, shown in list(pending):
            if COUNTER.uncounted(shown):
                m.latencies.append(round(time.monotonic() - made, 3))
                pending.remove((made, shown))
        time.sleep(0.02)
    if next_beat <= began + seconds + 0.5:  # the pass at the window's end
        m.beat_seconds += timed(beat_pass)
        m.beat_passes += 1
    m.seconds = time.monotonic() - began
    m.sql_writes, m.queries = COUNTER.take()
    m.list_calls, m.watch_requests = sim_counts(sim)
    if pending:
        beat_pass()  # uncounted: what the window left for the next tick
    deadline = time.monotonic() + 10
    while pending and time.monotonic() < deadline:
        for made, shown in list(pending):
            if COUNTER.uncounted(shown):
                m.latencies.append(round(time.monotonic() - made, 3))
                pending.remove((made, shown))
        time.sleep(0.05)
    m.mirrored = not pending
    COUNTER.take()
    return m


def watch_start(sim: KubeSimulator) -> tuple[list[KubeWatcher], Minute]:
    """Both threads, until each has listed and stamped: their first listings."""
    cluster = Cluster.objects.get(name=CLUSTER)
    sim.clear_calls()
    COUNTER.take()
    began = time.monotonic()
    watchers = [
        KubeWatcher(cluster_id=cluster.pk, cluster_name=CLUSTER, kind=kind)
        for kind in ("nodes", "pods")
    ]
    for watcher in watchers:
        watcher.start()
    while KubeWatch.objects.filter(cluster=cluster, watched_at__isnull=False).count() < 2:
        time.sleep(0.05)
    m = Minute("watch: first listing", seconds=time.monotonic() - began)
    m.sql_writes, m.queries = COUNTER.take()
    m.list_calls, m.watch_requests = sim_counts(sim)
    return watchers, m


def row(m: Minute) -> str:
    lat = sorted(m.latencies)
    p_max = f"{lat[-1]:.2f}" if lat else "-"  # beat pass: up to its interval
    return (
        f"{m.mode:<24} {m.seconds:>7.1f} {m.beat_passes:>5} {m.changes:>7} {m.list_calls:>6} "
        f"{m.watch_requests:>7} {m.sql_writes:>7} {m.per_minute(m.list_calls):>9.1f} "
        f"{m.per_minute(m.sql_writes):>9.1f} {p_max:>8} {m.beat_seconds:>8.2f}"
    )


def run(
    sim: KubeSimulator, nodes: int, pods_per_node: int, changes_per_minute: int, minutes: float
) -> dict[str, Any]:
    seed(sim, 1, nodes, pods_per_node)
    beat_pass()  # the mirror as a running control plane has it
    seconds = minutes * 60
    changes = Changes(sim, pods_per_node)
    beat = window(sim, changes, "beat pass only", seconds, changes_per_minute)
    watchers, first = watch_start(sim)
    try:
        watched = window(sim, changes, "watch + beat pass", seconds, changes_per_minute)
    finally:
        for watcher in watchers:
            watcher.stop()
        for watcher in watchers:
            watcher.join(15)
    print(
        f"1 cluster x {nodes} nodes x {pods_per_node} pods per node ({nodes * pods_per_node} "
        f"pods), pages of {settings.KUBE_LIST_PAGE_SIZE}, beat every "
        f"{settings.OBSERVE_INTERVAL.total_seconds():g} s, {changes_per_minute} changes/min\n"
    )
    print(
        f"{'mode':<24} {'seconds':>7} {'beats':>5} {'changes':>7} {'lists':>6} {'watches':>7} "
        f"{'writes':>7} {'lists/min':>9} {'writes/min':>9} {'max lat.':>8} {'beat s':>8}"
    )
    for m in (beat, first, watched):
        print(row(m))
    checks = {
        "both_mirrored_every_change": beat.mirrored and watched.mirrored,
        "watch_lists_nothing_after_its_first_listing": watched.list_calls == 0,
        "watch_changes_shown_within_2s": bool(watched.latencies)
        and max(watched.latencies) <= 2.0
        and len(watched.latencies) == watched.changes,
    }
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return {
        "nodes": nodes,
        "pods_per_node": pods_per_node,
        "changes_per_minute": changes_per_minute,
        "minutes": minutes,
        "page_size": settings.KUBE_LIST_PAGE_SIZE,
        "beat": {**asdict(beat), "lists_per_minute": beat.per_minute(beat.list_calls),
                 "writes_per_minute": beat.per_minute(beat.sql_writes)},
        "watch_first_listing": asdict(first),
        "watch": {**asdict(watched), "lists_per_minute": watched.per_minute(watched.list_calls),
                  "writes_per_minute": watched.per_minute(watched.sql_writes)},
        "checks": checks,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods-per-node", type=int, default=20)
    parser.add_argument("--changes-per-minute", type=int, default=6)
    parser.add_argument("--minutes", type=float, default=1.0)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
        return 2
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    connection_created.connect(_install)
    _install(None, connection)
    try:
        with KubeSimulator() as sim:
            summary = run(
                sim, args.nodes, args.pods_per_node, args.changes_per_minute, args.minutes
            )
    finally:
        connection_created.disconnect(_install)
        connections.close_all()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
    print(json.dumps(summary, separators=(",", ":")))
    return 0 if all(summary["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
