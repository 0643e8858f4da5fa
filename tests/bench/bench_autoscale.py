"""GPU pools that follow the pods: what a day of GPU jobs pays, and how long its pods wait,
with static pools sized for the peak, with a model of cluster-autoscaler, and with the
control plane's own autoscaler (autoscale/), side by side.

Run (PostgreSQL and Redis; a throw-away test database ``test_<name>`` is created and
dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
    REDIS_URL=redis://127.0.0.1:6379 \\
        .venv/bin/python tests/bench/bench_autoscale.py [--short] [--seed 1] \\
        [--hours 24] [--jobs-per-day 120] [--time-scale 720] [--boot-seconds 120] \\
        [--policies static,ca-model,autoscaler]

The real processes: a Celery worker with beat (observe and reconcile every
``--interval`` wall seconds), the whitesky simulator (each VM create takes the boot time),
the fake Kubernetes API with its scheduler and kubelets (``--schedule``) and its joiner
(a RUNNING VM is a Ready node; its GPUs are advertised once the control plane labelled
it and applied the device plugin). The trace (tests/bench/autoscale_trace.py, seeded):
a day of arrivals with office hours and bursts, durations from 5 minutes to 4 hours,
1, 2 or 4 GPUs of two types; two locations, each with cards for 70% of the trace's peak
of each type, the second dearer. Pods ask for their type by nodeSelector and finish after
their run time (``sim.capvco.io/run-seconds``).

Time is compressed ``--time-scale`` times: the arrivals, the run times, the kubelets'
delays, the boot time and cluster-autoscaler's timings. The
control plane's own intervals are wall seconds (a floor: the worker cannot tick 720
times a second), so every figure in trace time carries them multiplied by the scale.

The same trace runs against each policy in turn, from an empty cloud:

* ``static``: pools of 4-GPU machines for the trace's peak of each type, the cheaper
  location first, made before the trace starts (their time before it is not counted);
* ``ca-model``: a model of cluster-autoscaler's behaviour, NOT cluster-autoscaler itself:
  every scan (10 s; at most 10 a wall second) it adds machines for unschedulable pods to
  a pool picked at random among those of the pod's type whose machines hold its request
  (no price, no capacity awareness: a machine whose location has no card has no VM after
  15 minutes, is removed and its pool backed off 5 minutes), and removes a node with no
  pod that has been unneeded for 10 minutes, not within 10 minutes of a scale-up (its
  defaults), through the control plane's own pool scale and machine delete;
* ``autoscaler``: the control plane's own (docs/guides/gpu.md, "Let pools follow the
  pods"): every pool autoscaled from 0 to what its type's cards hold, with its default
  timings (idle 10 minutes, no drain within 10 minutes of a growth) compressed as the
  trace is, planned every ``--interval`` wall seconds.

Reported from the whitesky simulator's own billing (each vGPU's reserved intervals):
waste = GPU-hours paid during the trace / GPU-hours run by its pods; pending time of the
pods (created to running) p50 / p95 / max beside the boot time (a machine's VM created to
its node advertising GPUs, the median measured); machines made and removed, pool scale
actions, whitesky writes, pods that never ran, and what is left billed after the pools
were scaled to 0. The target for an autoscaler: waste <= 1.15 at p95 pending <= boot + 60 s.
Prints one table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

import kubernetes  # noqa: E402
import urllib3  # noqa: E402
import yaml  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from capvco_web.integrations.whitesky import operations  # noqa: E402
from capvco_web.models import AuditEvent  # noqa: E402
from cloud.models import Account, Location  # noqa: E402
from cloud.observe import account_locations_observe  # noqa: E402
from cloud.whitesky import whitesky_client  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from clusters.services import machine_delete, pool_scale  # noqa: E402
from simulator.whitesky import api as sim_api  # noqa: E402
from tests.bench.autoscale_trace import (  # noqa: E402
    INSTANCES_PER_CARD,
    LOCATIONS,
    MACHINE_SIZES,
    TYPES,
    Job,
    cards_for,
    peak_gpus,
    static_sizes,
    trace_make,
    world_make,
)
from tests.bench.support import (  # noqa: E402
    celery_worker,
    postgresql_missing,
    throwaway_database,
    wait_for,
)
from tests.e2e.processes import broker_flush  # noqa: E402
from tests.kube_sim import KubeSimulator  # noqa: E402
from tests.whitesky_sim import WhiteskySimulator  # noqa: E402

CLUSTER = "bench"
NAMESPACE = "jobs"
GPU = "nvidia.com/gpu"
RUN_SECONDS = "sim.capvco.io/run-seconds"
POLICIES = ("static", "ca-model", "autoscaler")
WRITES = frozenset(op.operation_id for op in operations.ALL_OPERATIONS if op.method != "GET")
# cluster-autoscaler's defaults, in trace seconds.
CA_SCAN = 10.0
CA_UNNEEDED = 600.0
CA_DELAY_AFTER_ADD = 600.0
CA_PROVISION_TIMEOUT = 900.0
CA_BACKOFF = 300.0


@dataclass(frozen=True)
class Scale:
    """Trace time against wall time: trace seconds = wall seconds x factor."""

    factor: float

    def wall(self, trace_seconds: float) -> float:
        return trace_seconds / self.factor

    def trace(self, wall_seconds: float) -> float:
        return wall_seconds * self.factor


def pool_name(gpu_type: str, location: str, gpus: int) -> str:
    return f"{TYPES[gpu_type].removeprefix('nvidia-')}-{location.split('-')[1]}-x{gpus}"


def pool_max(gpus: int, cards: int) -> int:
    return cards * INSTANCES_PER_CARD // gpus


# --- the cloud and the cluster ------------------------------------------------------------


@dataclass
class Plane:
    account: Account
    cluster: Cluster
    pools: list[MachinePool]
    kube: Any  # kubernetes.client.CoreV1Api of the fake cluster


def plane_make(
    sim: WhiteskySimulator,
    kube_sim: KubeSimulator,
    world: dict[str, Any],
    *,
    sizes: dict[tuple[str, str, int], int],
    cards: dict[str, int],
    boot_wall: float,
    autoscale: bool = False,
) -> Plane:
    """An empty database, cloud and Kubernetes; one cluster with the GPU add-on on, a pool
    per GPU type, location and machine size (replicas from `sizes`, else 0)."""
    call_command("flush", interactive=False, verbosity=0)
    sim.reset(world)
    known = {operation for _, _, operation, _ in sim_api.ROUTES}
    if operations.CREATE_VM.operation_id in known and boot_wall > 0:
        sim.fault(operation=operations.CREATE_VM.operation_id, latency_ms=round(boot_wall * 1000))
    kube_sim.reset()
    access = kube_sim.cluster(CLUSTER)
    account = Account.objects.create(
        name="bench",
        api_url=sim.api_url,
        iam_url=sim.iam_url,
        customer_id=sim.customer_id,
        credential=sim.token(),
    )
    with whitesky_client(account) as client:
        account_locations_observe(client=client, account=account)
    cluster = Cluster.objects.create(
        name=CLUSTER, account=account, gpu_addon=True, kubeconfig=yaml.safe_dump(access.kubeconfig)
    )
    pools = []
    for n, location in enumerate(LOCATIONS):
        site = ClusterSite.objects.create(
            cluster=cluster,
            location=Location.objects.get(account=account, name=location),
            cloudspace_id=f"cs-bench-{n}",
            image_id=200 + n,
        )
        for gpu_type in TYPES:
            for gpus in MACHINE_SIZES:
                pools.append(
                    MachinePool.objects.create(
                        cluster=cluster,
                        site=site,
                        name=pool_name(gpu_type, location, gpus),
                        replicas=sizes.get((gpu_type, location, gpus), 0),
                        gpu_type=gpu_type,
                        gpu_count=gpus,
                        autoscale_enabled=autoscale,
                        autoscale_max=pool_max(gpus, cards[gpu_type]) if autoscale else 0,
                    )
                )
    core = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config_dict(access.kubeconfig)
    )
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    return Plane(account=account, cluster=cluster, pools=pools, kube=core)


def node_gpus(node: Any) -> int:
    return int((node.status.allocatable or {}).get(GPU, "0"))


def pod_body(job: Job) -> dict[str, Any]:
    return {
        "metadata": {
            "name": job.name,
            "namespace": NAMESPACE,
            "annotations": {RUN_SECONDS: str(job.seconds)},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": {GPU: str(job.gpus)}},
                }
            ],
            "nodeSelector": {"capvco.io/gpu-type": job.label},
            "restartPolicy": "Never",
        },
    }


# --- what happens, as seen from Kubernetes ------------------------------------------------


@dataclass
class Seen:
    """When (wall clock) each pod was created, first running and finished, and when each
    node first advertised GPUs; kept by watches of the fake cluster."""

    created: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)  # deleted before seen finished
    node_gpus_at: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def watch_forever(
    list_call: Callable[..., Any],
    on_event: Callable[[str, Any], None],
    stop: threading.Event,
    *args: str,
) -> None:
    """List, then watch from that list's resourceVersion; again after a watch ends. Each
    object goes to `on_event` as the API server's JSON."""
    while not stop.is_set():
        listed = list_call(*args)
        for item in listed.items:
            on_event("ADDED", kubernetes.client.ApiClient().sanitize_for_serialization(item))
        watcher = kubernetes.watch.Watch()
        try:
            for event in watcher.stream(
                list_call, *args, resource_version=listed.metadata.resource_version,
                timeout_seconds=5,
            ):  # fmt: skip
                if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                    break  # an ERROR (410 Gone: compacted): list again
                on_event(event["type"], event["raw_object"])
                if stop.is_set():
                    break
        except kubernetes.client.ApiException as exc:
            if exc.status != 410:  # an expired resourceVersion: list again
                raise
        except urllib3.exceptions.ProtocolError:
            pass  # the server ended the watch: list again
        finally:
            watcher.stop()


def watches_start(core: Any, seen: Seen, stop: threading.Event) -> list[threading.Thread]:
    def pod_event(kind: str, pod: dict[str, Any]) -> None:
        now, name = time.time(), pod["metadata"]["name"]
        phase = pod.get("status", {}).get("phase")
        with seen.lock:
            if kind == "DELETED" and phase != "Succeeded":
                if name not in seen.finished:
                    seen.gone.setdefault(name, now)
                return
            if phase in ("Running", "Succeeded") and name not in seen.running:
                seen.running[name] = now
            if phase == "Succeeded" and name not in seen.finished:
                seen.finished[name] = now

    def node_event(kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        gpus = int(node.get("status", {}).get("allocatable", {}).get(GPU, "0"))
        if kind != "DELETED" and gpus and name not in seen.node_gpus_at:
            with seen.lock:
                seen.node_gpus_at[name] = time.time()

    threads = [
        threading.Thread(
            target=watch_forever,
            args=(lambda **kw: core.list_namespaced_pod(NAMESPACE, **kw), pod_event, stop),
            daemon=True,
        ),
        threading.Thread(
            target=watch_forever, args=(core.list_node, node_event, stop), daemon=True
        ),
    ]
    for thread in threads:
        thread.start()
    return threads


def replay(
    jobs: list[Job], core: Any, seen: Seen, scale: Scale, t0: float, stop: threading.Event
) -> None:
    """Create each job's pod at its time."""
    for job in jobs:
        if stop.wait(max(0.0, t0 + scale.wall(job.at) - time.time())):
            return
        with seen.lock:
            seen.created[job.name] = time.time()
        core.create_namespaced_pod(NAMESPACE, pod_body(job))


# --- a model of cluster-autoscaler ---------------------------------------------------------


class CaModel:
    """A model of cluster-autoscaler's behaviour with its default timings (see the module's
    docstring): it is not cluster-autoscaler. Acts through the control plane's pool scale
    and machine delete, as an operator's token would."""

    def __init__(self, plane: Plane, scale: Scale, cards: dict[str, int], seed: int) -> None:
        self.plane = plane
        self.cards = cards
        self.scale = scale
        self.rng = random.Random(seed)
        self.actor = get_user_model().objects.create_superuser("cluster-autoscaler-model")
        self.last_scale_up = -1e18
        self.machine_seen: dict[str, float] = {}
        self.unneeded_since: dict[str, float] = {}
        self.backoff_until: dict[int, float] = {}

    def run(self, stop: threading.Event) -> None:
        try:
            # Its scan, compressed; at most 10 a second (the listings cost the bench's CPU).
            while not stop.wait(max(0.1, self.scale.wall(CA_SCAN))):
                self.scan()
        finally:
            connection.close()

    def scan(self) -> None:
        now = time.time()
        core = self.plane.kube
        pods = core.list_namespaced_pod(NAMESPACE).items
        nodes = {n.metadata.name: n for n in core.list_node().items}
        pools = {p.pk: p for p in MachinePool.objects.filter(cluster=self.plane.cluster)}
        machines = list(
            Machine.objects.filter(
                pool__cluster=self.plane.cluster, deletion__isnull=True, delete_requested=False
            )
        )
        # Upcoming nodes, as cluster-autoscaler counts them: a pool's target size less its
        # registered nodes, each [pool, GPUs still free for the pods placed on it here].
        registered: Counter[int] = Counter()
        for machine in machines:
            node = f"capvco-{CLUSTER}-{machine.name}"
            self.machine_seen.setdefault(node, now)
            pool = pools[machine.pool_id]
            if node in nodes and node_gpus(nodes[node]):
                registered[pool.pk] += 1
                continue
            # No node registers for a machine whose location had no card: it has no VM.
            waited = now - self.machine_seen[node]
            if machine.vm_id is None and waited > self.scale.wall(CA_PROVISION_TIMEOUT):
                self.remove(machine, pool, "not registered within max-node-provision-time")
                self.backoff_until[pool.pk] = now + self.scale.wall(CA_BACKOFF)
                pool.refresh_from_db()
        upcoming: list[list[Any]] = [
            [pool, pool.gpu_count]
            for pool in pools.values()
            for _ in range(max(0, pool.replicas - registered[pool.pk]))
        ]
        added: Counter[int] = Counter()
        for pod in sorted(pods, key=lambda p: p.metadata.creation_timestamp):
            if not unschedulable(pod):
                continue
            want = int(pod.spec.containers[0].resources.limits[GPU])
            label = pod.spec.node_selector["capvco.io/gpu-type"]
            slot = next(
                (u for u in upcoming if TYPES[u[0].gpu_type] == label and u[1] >= want), None
            )
            if slot is None:
                fitting = [
                    p
                    for p in pools.values()
                    if TYPES[p.gpu_type] == label
                    and p.gpu_count >= want
                    and p.replicas + added[p.pk] < self.pool_max(p)
                    and self.backoff_until.get(p.pk, 0) <= now
                ]
                if not fitting:
                    continue
                pool = self.rng.choice(fitting)
                added[pool.pk] += 1
                slot = [pool, pool.gpu_count]
                upcoming.append(slot)
            slot[1] -= want
        for pk, more in added.items():
            pool = pools[pk]
            pool_scale(
                pool=pool,
                replicas=pool.replicas + more,
                actor=self.actor,
                reason="cluster-autoscaler model: unschedulable pods",
            )
            self.last_scale_up = now
        self.scale_down(now, nodes, pods, machines, pools)

    def scale_down(
        self,
        now: float,
        nodes: dict[str, Any],
        pods: list[Any],
        machines: list[Machine],
        pools: dict[int, MachinePool],
    ) -> None:
        busy = {
            p.spec.node_name
            for p in pods
            if p.spec.node_name and p.status.phase in ("Pending", "Running")
        }
        for machine in machines:
            node = f"capvco-{CLUSTER}-{machine.name}"
            if node not in nodes or not node_gpus(nodes[node]) or node in busy:
                self.unneeded_since.pop(node, None)
                continue
            since = self.unneeded_since.setdefault(node, now)
            if now - since >= self.scale.wall(
                CA_UNNEEDED
            ) and now - self.last_scale_up >= self.scale.wall(CA_DELAY_AFTER_ADD):
                # Tainted first, as cluster-autoscaler does, then checked again: a pod
                # bound since the listing keeps the node.
                core = self.plane.kube
                core.patch_node(node, {"spec": {"unschedulable": True}})
                selector = f"spec.nodeName={node}"
                if any(
                    p.status.phase in ("Pending", "Running")
                    for p in core.list_namespaced_pod(NAMESPACE, field_selector=selector).items
                ):
                    core.patch_node(node, {"spec": {"unschedulable": False}})
                    continue
                why = "unneeded for scale-down-unneeded-time"
                self.remove(machine, pools[machine.pool_id], why)
                self.unneeded_since.pop(node, None)

    def remove(self, machine: Machine, pool: MachinePool, why: str) -> None:
        reason = f"cluster-autoscaler model: {why}"
        machine_delete(machine=machine, actor=self.actor, reason=reason)
        pool.refresh_from_db()
        pool_scale(pool=pool, replicas=max(0, pool.replicas - 1), actor=self.actor, reason=reason)

    def pool_max(self, pool: MachinePool) -> int:
        return pool_max(pool.gpu_count, self.cards[pool.gpu_type])


def unschedulable(pod: Any) -> bool:
    if pod.spec.node_name or pod.status.phase != "Pending":
        return False
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or []
    )


# --- one policy, one run of the trace -------------------------------------------------------


@dataclass
class Result:
    policy: str
    jobs: int
    paid_gpu_hours: float = 0.0  # trace hours
    run_gpu_hours: float = 0.0
    cheaper_share: float = 0.0  # of the GPU-hours paid, those of the cheaper location
    pending: list[float] = field(default_factory=list)  # trace seconds, pods that ran
    boots: list[float] = field(default_factory=list)  # trace seconds
    never_ran: int = 0
    lost: int = 0  # ran, then went without finishing (their node removed under them)
    machines_made: int = 0
    machines_removed: int = 0
    scale_actions: int = 0
    whitesky_writes: int = 0
    wall_seconds: float = 0.0
    left_billed: int = 0  # vGPUs still billed once the pools were scaled to 0

    @property
    def waste(self) -> float:
        return self.paid_gpu_hours / self.run_gpu_hours if self.run_gpu_hours else float("inf")

    def pending_at(self, p: float) -> float:
        if not self.pending:
            return 0.0
        ordered = sorted(self.pending)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    @property
    def boot(self) -> float:
        return statistics.median(self.boots) if self.boots else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "waste": round(self.waste, 3),
            "paid_gpu_hours": round(self.paid_gpu_hours, 1),
            "run_gpu_hours": round(self.run_gpu_hours, 1),
            "cheaper_location_share": round(self.cheaper_share, 3),
            "pending_p50_s": round(self.pending_at(50)),
            "pending_p95_s": round(self.pending_at(95)),
            "pending_max_s": round(max(self.pending, default=0.0)),
            "boot_median_s": round(self.boot),
            "never_ran": self.never_ran,
            "lost": self.lost,
            "machines_made": self.machines_made,
            "machines_removed": self.machines_removed,
            "scale_actions": self.scale_actions,
            "whitesky_writes": self.whitesky_writes,
            "wall_seconds": round(self.wall_seconds, 1),
            "left_billed": self.left_billed,
        }


def paid_seconds(vgpus: list[dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """Per location, the vGPU-seconds whitesky bills within [start, end): every reserved
    interval of every vGPU, attached or not."""
    paid: Counter[str] = Counter()
    for vgpu in vgpus:
        for segment in vgpu["segments"]:
            until = segment["end"] if segment["end"] is not None else end
            paid[vgpu["location"]] += max(0.0, min(until, end) - max(segment["start"], start))
    return dict(paid)


def worker_env(args: argparse.Namespace, scale: Scale, *, autoscale: bool) -> dict[str, str]:
    """The control plane's intervals (wall seconds); the autoscaler's timings are its
    defaults (10 minutes each) compressed as the trace is."""
    timings = {
        "AUTOSCALE_INTERVAL_SECONDS": str(args.interval),
        "AUTOSCALE_IDLE_MINUTES": str(scale.wall(CA_UNNEEDED) / 60),
        "AUTOSCALE_DOWN_DELAY_AFTER_UP_MINUTES": str(scale.wall(CA_DELAY_AFTER_ADD) / 60),
    }
    return (timings if autoscale else {}) | {
        "OBSERVE_INTERVAL_SECONDS": str(args.interval),
        "RECONCILE_INTERVAL_SECONDS": str(args.interval),
        "ORPHAN_SWEEP_INTERVAL_SECONDS": "60",
        "CATALOG_OBSERVE_INTERVAL_SECONDS": "60",
        "MACHINE_RETRY_BASE_SECONDS": str(args.interval),
        "MACHINE_RETRY_MAX_SECONDS": str(4 * args.interval),
    }


def policy_run(
    policy: str,
    jobs: list[Job],
    sim: WhiteskySimulator,
    kube_sim: KubeSimulator,
    args: argparse.Namespace,
    folder: Path,
) -> Result:
    scale = Scale(args.time_scale)
    peaks = peak_gpus(jobs)
    cards = cards_for(peaks)
    sizes = static_sizes(peaks, cards) if policy == "static" else {}
    plane = plane_make(
        sim,
        kube_sim,
        world_make(peaks),
        sizes=sizes,
        cards=cards,
        boot_wall=scale.wall(args.boot_seconds),
        autoscale=policy == "autoscaler",
    )
    result = Result(policy=policy, jobs=len(jobs))
    seen = Seen()
    stop = threading.Event()
    log = folder / f"worker-{policy}.log"
    broker_flush()
    span = scale.wall(max(j.at + j.seconds for j in jobs))
    with celery_worker(
        [sys.executable, "-m", "celery"], folder, log, slots=args.slots,
        env=worker_env(args, scale, autoscale=policy == "autoscaler"),
    ):  # fmt: skip
        watches_start(plane.kube, seen, stop)
        machines = sum(sizes.values())
        wait_for(
            lambda: (
                len(seen.node_gpus_at) >= machines
                and Location.objects.filter(observation_complete=True).count() == len(LOCATIONS)
            ),
            f"{machines} static machines' nodes advertising GPUs",
            120 + 5 * machines,
        )
        print(f"  {policy}: playing {len(jobs)} jobs over {span:.0f} s ...", flush=True)
        sim.clear_calls()
        t0 = time.time()
        threads = [
            threading.Thread(
                target=replay, args=(jobs, plane.kube, seen, scale, t0, stop), daemon=True
            )
        ]
        if policy == "ca-model":
            model = CaModel(plane, scale, cards, args.seed)
            threads.append(threading.Thread(target=model.run, args=(stop,), daemon=True))
        for thread in threads:
            thread.start()
        names = {j.name for j in jobs}
        last = time.monotonic()

        def trace_done() -> bool:
            nonlocal last
            with seen.lock:
                done = len(seen.finished) + len(seen.gone.keys() & seen.running.keys())
                started = len(seen.running)
            if time.monotonic() - last >= 15:
                last = time.monotonic()
                print(
                    f"    {time.time() - t0:6.0f} s: {len(seen.created)} created, {started} "
                    f"started, {done} done",
                    flush=True,
                )
            return done >= len(names)

        try:
            wait_for(trace_done, "every job to run", 1.5 * span + 120, every=0.5)
        except TimeoutError as exc:
            print(f"  {policy}: {exc}")
        t_end = time.time()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        calls = sim.calls()["calls"]
        state = sim.state()
        result.wall_seconds = t_end - t0
        result.whitesky_writes = sum(1 for c in calls if c["operation"] in WRITES)
        ops = Counter(str(c["operation"]) for c in calls)
        result.machines_made = ops[operations.CREATE_VM.operation_id]
        result.machines_removed = ops[operations.DELETE_VM.operation_id]
        result.scale_actions = AuditEvent.objects.filter(
            action__in=("pool.scale", "pool.autoscale")
        ).count()
        paid = paid_seconds(state["vgpus"], t0, t_end)
        result.paid_gpu_hours = scale.trace(sum(paid.values())) / 3600
        if paid:
            result.cheaper_share = paid.get(next(iter(LOCATIONS)), 0.0) / sum(paid.values())
        by_name = {j.name: j for j in jobs}
        with seen.lock:
            # What the pods asked for and ran: a finished pod its run time, a lost one
            # until it went.
            run = sum(by_name[n].gpus * by_name[n].seconds for n in seen.finished)
            run += sum(
                by_name[n].gpus * scale.trace(seen.gone[n] - seen.running[n])
                for n in seen.gone.keys() & seen.running.keys()
            )
            result.run_gpu_hours = run / 3600
            result.pending = [scale.trace(seen.running[n] - seen.created[n]) for n in seen.running]
            result.never_ran = len(names - set(seen.running))
            result.lost = len(seen.gone.keys() & seen.running.keys())
            created = {
                v["name"]: v["creation_time"]
                for v in state["vms"]
                if v["creation_time"] is not None
            }
            result.boots = [
                scale.trace(at - created[node])
                for node, at in seen.node_gpus_at.items()
                if node in created
            ]

        # Scale everything to 0: nothing may stay billed.
        MachinePool.objects.filter(cluster=plane.cluster).update(
            replicas=0, autoscale_enabled=False
        )

        def released() -> bool:
            return not any(v["status"] != "DESTROYED" for v in sim.state()["vgpus"])

        try:
            wait_for(released, "the pools' teardown", 180, every=1)
        except TimeoutError as exc:
            print(f"  {policy}: {exc}")
        result.left_billed = sum(
            1 for v in sim.state()["vgpus"] if v["segments"] and v["segments"][-1]["end"] is None
        )
    return result


# --- reporting ------------------------------------------------------------------------------


def table(results: list[Result], args: argparse.Namespace) -> None:
    rows: list[tuple[str, Callable[[Result], object]]] = [
        ("waste (GPU-h paid / GPU-h run by pods)", lambda r: f"{r.waste:.2f}"),
        ("GPU-hours paid", lambda r: f"{r.paid_gpu_hours:.1f}"),
        ("GPU-hours run by pods", lambda r: f"{r.run_gpu_hours:.1f}"),
        ("paid in the cheaper location", lambda r: f"{r.cheaper_share:.0%}"),
        ("pending p50, s", lambda r: f"{r.pending_at(50):.0f}"),
        ("pending p95, s", lambda r: f"{r.pending_at(95):.0f}"),
        ("pending max, s", lambda r: f"{r.pending_at(100):.0f}"),
        ("boot (VM created -> GPUs), median s", lambda r: f"{r.boot:.0f}"),
        ("pods that never ran", lambda r: r.never_ran),
        ("pods lost under a removed node", lambda r: r.lost),
        ("machines made / removed", lambda r: f"{r.machines_made} / {r.machines_removed}"),
        ("pool scale actions", lambda r: r.scale_actions),
        ("whitesky writes", lambda r: r.whitesky_writes),
        ("vGPUs left billed at 0 replicas", lambda r: r.left_billed),
        ("wall seconds", lambda r: f"{r.wall_seconds:.0f}"),
    ]
    width = 40
    print(f"\n{results[0].jobs} jobs; times in trace seconds (x{args.time_scale:g} wall)")
    print(f"{'':<{width}}" + "".join(f"{r.policy:>13}" for r in results))
    for label, value in rows:
        print(f"{label:<{width}}" + "".join(f"{value(r)!s:>13}" for r in results))
    print(
        "ca-model is a model of cluster-autoscaler's behaviour with its default timings "
        "(scan 10 s, scale-down-unneeded 10 min, scale-down-delay-after-add 10 min, no price "
        "or capacity awareness), not cluster-autoscaler itself."
    )


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's settings (`--short`: the CI size)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=24.0, help="the trace's length")
    parser.add_argument("--jobs-per-day", type=int, default=120)
    parser.add_argument("--bursts-per-day", type=int, default=4)
    parser.add_argument(
        "--from-hour", type=float, default=0.0, help="the trace's first hour of the day"
    )
    parser.add_argument("--time-scale", type=float, default=720.0, help="trace s per wall s")
    parser.add_argument(
        "--boot-seconds", type=float, default=120.0, help="a VM create, trace seconds"
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, help="observe and reconcile, wall seconds"
    )
    parser.add_argument("--slots", type=int, default=4, help="worker processes")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument(
        "--short",
        action="store_true",
        help="the CI size: 3 hours from 10:00, 240 jobs a day, 2 bursts",
    )
    parser.add_argument("--log-dir", type=Path, help="keep the workers' logs here")
    args = parser.parse_args(argv)
    if args.short:
        args.hours, args.from_hour, args.jobs_per_day, args.bursts_per_day = 3, 10, 240, 16
    args.policies = [p for p in args.policies.split(",") if p]
    if unknown := set(args.policies) - set(POLICIES):
        parser.error(f"unknown policies {sorted(unknown)}: choose among {', '.join(POLICIES)}")
    return args


def policies_run(jobs: list[Job], args: argparse.Namespace, log_dir: Path) -> list[Result]:
    """Each policy in turn, on the same simulators (reset in between)."""
    kube_args = (
        "--schedule",
        "--time-scale",
        str(args.time_scale),
        "--join-interval",
        str(min(0.5, args.interval)),
        "--no-join-demo-pods",
    )
    with (
        WhiteskySimulator() as sim,
        KubeSimulator(extra_args=("--join-whitesky", sim.base_url, *kube_args)) as kube,
    ):
        return [policy_run(policy, jobs, sim, kube, args, log_dir) for policy in args.policies]


def trace_of(args: argparse.Namespace) -> list[Job]:
    return trace_make(
        seed=args.seed,
        hours=args.hours,
        jobs_per_day=args.jobs_per_day,
        bursts_per_day=args.bursts_per_day,
        from_hour=args.from_hour,
    )


def main() -> int:
    args = arguments()
    if postgresql_missing():
        return 2
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        print("set REDIS_URL (or CELERY_BROKER_URL) to a Redis server: beat needs a broker")
        return 2
    jobs = trace_of(args)
    print(
        f"autoscale: {len(jobs)} jobs over {args.hours:g} h (seed {args.seed}), peak GPUs "
        f"{peak_gpus(jobs)}, x{args.time_scale:g}, boot {args.boot_seconds:g} s, interval "
        f"{args.interval:g} s wall, {args.slots} slots",
        flush=True,
    )
    with throwaway_database(), tempfile.TemporaryDirectory() as tmp:
        log_dir = args.log_dir or Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        results = policies_run(jobs, args, log_dir)
    table(results, args)
    figures = {"jobs": len(jobs), "args": vars(args) | {"log_dir": None}}
    figures["results"] = [r.as_json() for r in results]
    print(json.dumps(figures, default=str))
    clean = all(r.never_ran == 0 and r.lost == 0 and r.left_billed == 0 for r in results)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
