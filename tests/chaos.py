"""A seeded random fault run of the GPU lifecycle, and the invariants it must leave.

Two real Celery workers (the first runs beat) observe, reconcile and sweep orphans against
the whitesky simulator with intervals and timeouts of a second or two. Meanwhile a driver,
from one seed, scales pools up and down through the API, force-deletes machines, deletes
clusters and makes them again under the same name once they are gone; the simulator fails
calls at a rate (5xx, 429 with Retry-After, answers later than the client waits, answers
lost after the change was made, listings that fail); workers are killed with SIGKILL now
and then and started again. Then the faults stop, the run settles (bounded), and the
invariants below are checked, each failure naming what is wrong and the seed.

The suite runs a short one (tests/e2e/test_chaos.py); a long one is a command, against the
PostgreSQL and Redis of bin/test (it makes and drops its own test database):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco REDIS_URL=redis://127.0.0.1:6379 \\
        .venv/bin/python -m tests.chaos --seed 7 --minutes 3

It prints its seed first. The seed fixes every decision of the run (actions, faults,
kills and when they come); what the workers do in between depends on the machine, so a
seed replays the same storm, not the same interleaving.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any, Protocol

if __name__ == "__main__":  # the command: Django first, with the test settings
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()

from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.models import Account, Location, Membership, VirtualMachine
from cloud.observe import account_locations_observe
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, Machine, MachinePool
from clusters.observe import location_observe
from clusters.services import cluster_delete, machine_force_delete
from gpus import naming
from gpus.models import VgpuReservation
from tests.e2e.processes import broker_flush, celery_worker, worker_kill
from tests.factories import role_group
from tests.gpus.conftest import BE, CLOUDSPACES, IMAGES, NL, Plane
from tests.whitesky_sim import WhiteskySimulator

CLUSTER_NAMES = ("alpha", "bravo")
MAX_REPLICAS = 3
# Seconds between the driver's actions, failed listings, and worker kills (uniform).
ACTION_EVERY = (1.0, 3.0)
SECOND_THOUGHT = (0.2, 1.0)  # a pool scaled again soon after
LISTING_FAILS_EVERY = (8.0, 20.0)
KILL_EVERY = (6.0, 20.0)
ACTOR = SystemActor.RECONCILER
MID_STEP = (Machine.Phase.CREATING, Machine.Phase.ATTACHING, Machine.Phase.STARTING)

# Short whitesky timeouts, so that a lost create or reserve is decided within seconds
# (only from a listing begun after connect + long read), and the run settles.
CONNECT, READ, LONG_READ = 1.0, 1.5, 2.5
WORKER_ENV = {
    "OBSERVE_INTERVAL_SECONDS": "1",
    "RECONCILE_INTERVAL_SECONDS": "1",
    # A machine failed by a fault is tried again within seconds, so the run settles.
    "MACHINE_RETRY_BASE_SECONDS": "1",
    "MACHINE_RETRY_MAX_SECONDS": "4",
    "ORPHAN_SWEEP_INTERVAL_SECONDS": "2",
    "WHITESKY_CONNECT_TIMEOUT_SECONDS": str(CONNECT),
    "WHITESKY_READ_TIMEOUT_SECONDS": str(READ),
    "WHITESKY_LONG_READ_TIMEOUT_SECONDS": str(LONG_READ),
    # Several pages per listing, so that a listing can also fail or move midway.
    "WHITESKY_VGPU_PAGE_SIZE": "4",
    "CELERY_TASK_SOFT_TIME_LIMIT": "30",
    "CELERY_TASK_TIME_LIMIT": "45",
}

# What the simulator does to a call, by kind. A late answer comes after the client stopped
# waiting (read timeout) but before connect + long read: the call still lands, within the
# window in which the control plane waits for it.
ERRORS: list[dict[str, Any]] = [
    {"status": 500},
    {"status": 502},
    {"status": 503, "retry_after": 1},
    {"status": 429, "retry_after": 1},
]
LOST: list[dict[str, Any]] = [{"lost_response": "drop"}, {"lost_response": "504"}]


def _late(seconds: float) -> dict[str, Any]:
    return {"latency_ms": int(seconds * 1000)}


FAULT_MENU: dict[str, list[dict[str, Any]]] = {
    # reads
    "listCustomerVGPUS": [*ERRORS, _late(READ + 0.4)],
    "listCloudspaceVirtualMachines": [*ERRORS, _late(READ + 0.4)],
    "listAvailableGPUProfiles": [*ERRORS, _late(READ + 0.4)],
    "getVirtualMachineInfo": [*ERRORS, _late(READ + 0.4)],
    "listCustomerLocations": [*ERRORS],
    # writes sent once (their answer lost: resolved by name from a later listing)
    "createVirtualMachine": [*ERRORS, *LOST, _late(LONG_READ + 0.3)],
    "reserveAndAttachVGPUToVM": [*ERRORS, *LOST, _late(READ + 0.5)],
    "attachVGPUToVM": [*ERRORS, *LOST, _late(READ + 0.5)],
    # writes the client repeats
    "startVirtualMachine": [*ERRORS, *LOST, _late(READ + 0.4)],
    "stopVirtualMachine": [*ERRORS, *LOST, _late(READ + 0.4)],
    "deleteVirtualMachine": [*ERRORS, *LOST, _late(LONG_READ + 0.3)],
    "deleteVGPU": [*ERRORS, *LOST, _late(READ + 0.4)],
}
# A task that gave up because whitesky kept failing, as the faults make it.
WHITESKY_FAILURE = re.compile(
    r"raised unexpected: (Unavailable|RateLimited|ResponseLost|IncompleteListing|"
    r"WhiteskyError|Conflict|CapacityExhausted)\("
)
LISTINGS = ("listCustomerVGPUS", "listCloudspaceVirtualMachines", "listAvailableGPUProfiles")


class ChaosError(Exception):
    """The run itself went wrong (not the lifecycle): the API refused the driver."""


@dataclass
class ChaosReport:
    seed: int
    minutes: float
    problems: list[str] = field(default_factory=list)
    actions: Counter[str] = field(default_factory=Counter)
    faults_fired: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    settled_after: float | None = None
    held_after: float | None = None
    logs: Path | None = None

    def summary(self) -> str:
        lines = [
            f"chaos seed {self.seed}: {self.minutes:g} min of faults, "
            + ", ".join(f"{n} {what}" for what, n in sorted(self.actions.items()))
            + f", {self.kills} workers killed, "
            + f"{sum(self.faults_fired.values())} faults fired in {self.calls.total()} calls",
            "faults fired / calls: "
            + ", ".join(
                f"{op} {self.faults_fired[op]}/{n}" for op, n in sorted(self.calls.items()) if op
            ),
        ]
        if self.settled_after is not None:
            lines.append(
                f"settled {self.settled_after:.0f} s after the faults stopped (every invariant "
                f"held after {self.held_after:.1f} s, then still so once no late call could land)"
            )
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s) after settling (seed {self.seed}):")
            lines += [f"  - {problem}" for problem in self.problems]
            lines.append(f"replay: .venv/bin/python -m tests.chaos --seed {self.seed}")
        if self.logs is not None:
            lines.append(f"worker logs: {self.logs}")
        return "\n".join(lines)


# --- the people: an operator at the API, and the services ---------------------------------


class Operator:
    """Makes clusters and scales pools through the API, as a person would."""

    def __init__(
        self,
        account: Account,
        api: Callable[[User], Any] | None = None,
        kubeconfigs: dict[str, str] | None = None,
        autoscaled: Iterable[str] = (),
    ) -> None:
        """`api` makes the person's client (the test client by default): one with the
        test client's post(url, data, format=...) and patch answering .status_code and
        .data. `kubeconfigs`: by cluster name, its workload cluster's (with the GPU add-on
        on); none by default. `autoscaled`: the clusters whose A100 pool the autoscaler
        sizes (between 0 and MAX_REPLICAS machines, from their pending pods)."""
        self.account = account
        self.kubeconfigs = kubeconfigs or {}
        self.autoscaled = set(autoscaled)
        user, _ = User.objects.get_or_create(username="chaos-operator")
        # Makes clusters, so the account's admin (an operator may only scale).
        Membership.objects.get_or_create(
            user=user, account=account, defaults={"role": role_group("admin")}
        )
        if api is None:
            self.api = APIClient()
            self.api.force_login(user)
        else:
            self.api = api(user)

    def _send(self, method: str, url: str, data: dict[str, Any]) -> dict[str, Any]:
        response = getattr(self.api, method)(url, data, format="json")
        if response.status_code not in (200, 201, 202):
            raise ChaosError(
                f"{method.upper()} {url} {data}: {response.status_code} {response.data}"
            )
        return dict(response.data)

    def cluster_create(self, name: str, rng: random.Random) -> str:
        kube = (
            {"kubeconfig": self.kubeconfigs[name], "gpu_addon": True}
            if name in self.kubeconfigs
            else {}
        )
        cluster = self._send(
            "post", "/api/v1/clusters/", {"name": name, "account": self.account.pk, **kube}
        )
        sites = {}
        for location in (NL, BE):
            site = {
                "cluster": cluster["id"],
                "location": Location.objects.get(account=self.account, name=location).pk,
                "cloudspace_id": CLOUDSPACES[location],
                "image_id": IMAGES[location],
            }
            sites[location] = self._send("post", "/api/v1/sites/", site)["id"]
        pools = [
            ("a100", NL, {"type": "NVIDIA A100", "count": rng.choice([1, 2])}),
            ("t4", BE, {"type": "NVIDIA T4", "count": 1}),
            ("cpu", rng.choice([NL, BE]), {"count": 0}),
        ]
        made = []
        for pool, location, gpu in pools:
            replicas = rng.randint(0, MAX_REPLICAS)
            body = {
                "cluster": cluster["id"],
                "site": sites[location],
                "name": pool,
                "replicas": replicas,
                "gpu": gpu,
            }
            if pool == "a100" and name in self.autoscaled:
                replicas = 0
                body |= {"replicas": 0, "autoscale": {"enabled": True, "max": MAX_REPLICAS}}
            self._send("post", "/api/v1/pools/", body)
            sized = "autoscaled" if "autoscale" in body else f"x{replicas}"
            made.append(f"{pool} {sized} ({gpu.get('type', 'no GPU')} {gpu['count']})")
        return f"cluster {name}: {', '.join(made)}"

    def pool_scale(self, pool: MachinePool, replicas: int) -> None:
        self._send(
            "post", f"/api/v1/pools/{pool.pk}/scale/", {"replicas": replicas, "reason": "chaos"}
        )

    def pool_bounds(self, pool: MachinePool, low: int, high: int) -> None:
        """An autoscaled pool's bounds changed: what a person edits of such a pool."""
        autoscale = {"enabled": True, "min": low, "max": high}
        self._send("patch", f"/api/v1/pools/{pool.pk}/", {"autoscale": autoscale})

    def release(self, reservation: VgpuReservation) -> None:
        """A person's release of a vGPU no machine holds."""
        self._send(
            "post", f"/api/v1/reservations/{reservation.pk}/release/", {"reason": "chaos: a leak"}
        )


# --- the workers --------------------------------------------------------------------------


class Workers:
    """The run's two workers (the first runs beat), each killed and started again at will."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder = folder
        self.env = env
        self.running: dict[
            int, tuple[AbstractContextManager[subprocess.Popen[bytes]], subprocess.Popen[bytes]]
        ] = {}
        self.started = 0
        self.kills = 0

    def start(self, index: int, *, beat: bool | None = None) -> None:
        """`beat`: whether it runs beat (the first worker's alone by default)."""
        self.started += 1
        folder = self.folder / f"worker{index}-{self.started:03d}"
        folder.mkdir(parents=True)
        name = f"chaos{index}-{self.started}@%h"
        beat = index == 0 if beat is None else beat
        manager = celery_worker(folder, "--hostname", name, beat=beat, **self.env)
        self.running[index] = (manager, manager.__enter__())

    def kill(self, index: int) -> None:
        manager, process = self.running.pop(index)
        worker_kill(process)
        manager.__exit__(None, None, None)
        self.kills += 1

    def exited(self) -> list[tuple[int, int]]:
        """Workers that ended by themselves (not killed here), with their exit status."""
        return [
            (index, code)
            for index, (_, process) in self.running.items()
            if (code := process.poll()) is not None
        ]

    def stop(self) -> None:
        for index in list(self.running):
            manager, _ = self.running.pop(index)
            manager.__exit__(None, None, None)


# --- the run ------------------------------------------------------------------------------


def _account(sim: WhiteskySimulator, rng: random.Random, origin: str | None = None) -> Account:
    """`origin`: where the control plane reaches the simulator (itself by default)."""
    account = Account.objects.create(
        name="chaos",
        api_url=f"{origin}/api/1" if origin else sim.api_url,
        iam_url=origin or sim.iam_url,
        customer_id=sim.customer_id,
        credential=sim.token(),
        orphan_auto_release=True,
        orphan_grace_period=timedelta(0),
        orphan_confirmations=rng.choice([1, 2]),
    )
    with whitesky_client(account) as client:
        # Its locations and their cards, as right after an account is added: a GPU pool
        # is judged against the cards (one a location never listed cannot be).
        for location in account_locations_observe(client=client, account=account):
            location_observe(client=client, location=location)
    return account


def faults_arm(sim: WhiteskySimulator, rng: random.Random, rate: float) -> list[str]:
    """Two kinds of fault per operation of the menu, each firing at about `rate`."""
    armed = []
    for operation, kinds in FAULT_MENU.items():
        for kind in rng.sample(kinds, k=min(2, len(kinds))):
            at = round(rate * rng.uniform(0.5, 1.5), 3)
            sim.fault(operation=operation, rate=at, seed=rng.randrange(2**31), **kind)
            armed.append(f"{operation} {kind} at {at}")
    return armed


def listing_fail(sim: WhiteskySimulator, rng: random.Random) -> str:
    """A listing that fails outright: enough failures in a row to exhaust the retries,
    from its first page or a later one."""
    operation = rng.choice(LISTINGS)
    spec = {
        "status": rng.choice([500, 503]),
        "times": rng.randint(4, 8),
        "skip": rng.choice([0, 1]),
    }
    sim.fault(operation=operation, **spec)
    return f"{operation} fails {spec}"


class Driver:
    """The random actions of a person, from the seed."""

    def __init__(
        self, operator: Operator, rng: random.Random, strays: WhiteskySimulator | None = None
    ) -> None:
        """`strays`: the simulator in which someone reserves a vGPU by hand now and then
        (a leak of no machine, in the A100 pools' location), which the person then
        releases through the API once it is shown; none by default."""
        self.operator = operator
        self.rng = rng
        self.strays = strays
        self.made_strays = 0
        self.second_thought: int | None = None
        """A pool just scaled that will be scaled again at once (while its machines are
        being made: the edit races the workers)."""
        self.then_delete: int | None = None
        """A cluster whose machine was force-deleted mid-step, deleted at once (while that
        machine's create or reserve may still land)."""

    def act(self) -> tuple[str, str]:
        """Do one thing; answers (kind, what)."""
        rng = self.rng
        if self.second_thought is not None:
            pool = MachinePool.objects.filter(
                pk=self.second_thought, cluster__state=Cluster.State.ACTIVE
            ).first()
            self.second_thought = None
            if pool is not None:
                return "scale", self._scale(pool, "again: ")
        if self.then_delete is not None:
            cluster = Cluster.objects.filter(pk=self.then_delete).first()
            self.then_delete = None
            if cluster is not None and cluster.state == Cluster.State.ACTIVE:
                cluster_delete(cluster=cluster, actor=ACTOR, reason="chaos: delete the cluster")
                return "cluster_delete", f"delete cluster {cluster.name} at once"
        active = list(Cluster.objects.filter(state=Cluster.State.ACTIVE).order_by("name"))
        existing = set(Cluster.objects.values_list("name", flat=True))
        gone = [name for name in CLUSTER_NAMES if name not in existing]
        machines = list(Machine.objects.select_related("pool__cluster").order_by("pk"))
        # One cluster at a time is deleted: the other keeps machines coming and going.
        kinds = {"scale": 6 if active else 0, "cluster_delete": 1 if len(active) > 1 else 0}
        kinds["force_delete"] = 1 if machines else 0
        kinds["recreate"] = 3 if gone else 0
        shown = self.strays_shown()
        if self.strays is not None:
            kinds["stray"] = 1 if not shown and self.rng.random() < 0.3 else 0
            kinds["release"] = 2 if shown else 0
        if not any(kinds.values()):
            return "wait", "nothing to do: every cluster is being deleted"
        kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
        if kind == "scale":
            cluster = rng.choice(active)
            pools = list(cluster.pools.order_by("name"))
            if not pools:  # made again, its pools refused (a fault): as the person left it
                return "wait", f"cluster {cluster.name} has no pool to scale"
            pool = rng.choice(pools)
            if pool.autoscale_enabled:
                low = rng.randint(0, 1)
                high = rng.randint(max(low, 1), MAX_REPLICAS)
                self.operator.pool_bounds(pool, low, high)
                return "bounds", f"bounds {pool.cluster.name}/{pool.name} {low} {high}"
            if rng.random() < 0.3:
                self.second_thought = pool.pk
            return kind, self._scale(pool)
        if kind == "stray":
            assert self.strays is not None
            name = f"hand-{self.made_strays}"
            self.made_strays += 1
            made = self.strays.seed(CLOUDSPACES[NL], vgpus=1, prefix=name)["vgpu_ids"]
            return kind, f"stray vGPU {name}-vgpu-0 ({made[0]}) reserved by hand"
        if kind == "release":
            reservation = rng.choice(shown)
            self.operator.release(reservation)
            return kind, f"release {reservation.name} ({reservation.vgpu_id})"
        if kind == "cluster_delete":
            cluster = rng.choice(active)
            cluster_delete(cluster=cluster, actor=ACTOR, reason="chaos: delete the cluster")
            return kind, f"delete cluster {cluster.name}"
        if kind == "force_delete":
            # Half the time one mid-step (a create or reserve on its way), if there is one.
            busy = [m for m in machines if m.phase in MID_STEP or m.vm_create_deadline]
            machine = rng.choice(busy if busy and rng.random() < 0.5 else machines)
            if machine in busy and len(active) > 1 and rng.random() < 0.3:
                self.then_delete = machine.pool.cluster_id
            what = f"force-delete {machine.pool.cluster.name}/{machine.name} ({machine.phase})"
            machine_force_delete(machine=machine, actor=ACTOR, reason="chaos: force delete")
            return kind, what
        name = rng.choice(gone)
        return kind, f"make again {self.operator.cluster_create(name, rng)}"

    @staticmethod
    def strays_shown() -> list[VgpuReservation]:
        """The vGPUs reserved by hand that the API shows and no one asked to release."""
        return list(
            VgpuReservation.objects.filter(
                name__startswith="hand-",
                state__in=[VgpuReservation.State.RESERVED, VgpuReservation.State.ATTACHED],
                release_requested_at__isnull=True,
                vgpu_id__isnull=False,
            ).order_by("pk")
        )

    def _scale(self, pool: MachinePool, again: str = "") -> str:
        replicas = self.rng.choice([n for n in range(MAX_REPLICAS + 1) if n != pool.replicas])
        self.operator.pool_scale(pool, replicas)
        return f"scale {again}{pool.cluster.name}/{pool.name} {pool.replicas} -> {replicas}"


def chaos_run(
    *,
    sim: WhiteskySimulator,
    seed: int,
    minutes: float,
    workdir: Path,
    settle_seconds: float = 120,
    fault_rate: float = 0.04,
    say: Callable[[str], None] = print,
) -> ChaosReport:
    """One run; the database must be empty and the simulator fresh. Answers the report,
    whose `problems` are empty when every invariant held after settling."""
    report = ChaosReport(seed=seed, minutes=minutes, logs=workdir)
    rngs = {name: random.Random(f"{seed}:{name}") for name in ("setup", "act", "fault", "kill")}
    start = time.monotonic()

    def log(message: str) -> None:
        say(f"[{time.monotonic() - start:7.1f}s] {message}")

    sim.reset()
    broker_flush()
    account = _account(sim, rngs["setup"])
    operator = Operator(account)
    for name in CLUSTER_NAMES:
        log(operator.cluster_create(name, rngs["setup"]))
    log(f"orphans: auto-release, grace 0, {account.orphan_confirmations} confirmation(s)")
    for armed in faults_arm(sim, rngs["fault"], fault_rate):
        log(f"fault: {armed}")

    workers = Workers(workdir, WORKER_ENV)
    driver = Driver(operator, rngs["act"])
    try:
        workers.start(0)
        workers.start(1)
        _storm(report, workers, driver, sim, rngs, minutes * 60, log)
        report.calls.update(str(call["operation"]) for call in sim.calls()["calls"])
        for fault in sim.faults():
            report.faults_fired[fault["operation"]] += fault["fired"]
        sim.clear_faults()
        for index in (0, 1):
            if index not in workers.running:
                workers.start(index)
        log("faults off, every worker up: settling")
        _settle(report, Plane(sim=sim, account=account), settle_seconds, log)
    finally:
        workers.stop()
        report.kills = workers.kills
        broker_flush()
    report.problems += worker_log_problems(workdir)
    return report


def _storm(
    report: ChaosReport,
    workers: Workers,
    driver: Driver,
    sim: WhiteskySimulator,
    rngs: dict[str, random.Random],
    seconds: float,
    log: Callable[[str], None],
) -> None:
    now = time.monotonic()
    end = now + seconds
    next_action = now + rngs["act"].uniform(*ACTION_EVERY)
    next_listing_fault = now + rngs["fault"].uniform(*LISTING_FAILS_EVERY)
    # The first kill comes within the first third, however short the run.
    next_kill = now + min(rngs["kill"].uniform(*KILL_EVERY), seconds / 3)
    kill_aimed, aim_until = rngs["kill"].random() < 0.5, next_kill + 5
    next_census = now + 10
    restart_at: dict[int, float] = {}
    while (now := time.monotonic()) < end:
        for index, code in workers.exited():
            report.problems.append(f"worker {index} exited by itself (status {code})")
            workers.running.pop(index)
            restart_at[index] = now
        if now >= next_action:
            kind, what = driver.act()
            report.actions[kind] += 1
            log(what)
            soon = driver.second_thought is not None or driver.then_delete is not None
            next_action = now + rngs["act"].uniform(*(SECOND_THOUGHT if soon else ACTION_EVERY))
        if now >= next_listing_fault:
            log(listing_fail(sim, rngs["fault"]))
            next_listing_fault = now + rngs["fault"].uniform(*LISTING_FAILS_EVERY)
        # Half the kills wait (a little) for a write in flight, to land mid-step.
        if now >= next_kill and (kill_aimed is False or _in_flight() or now >= aim_until):
            index = rngs["kill"].choice(sorted(workers.running) or [0])
            if index in workers.running:
                workers.kill(index)
                log(f"SIGKILL worker {index}{' (a write in flight)' if _in_flight() else ''}")
                restart_at[index] = now + rngs["kill"].uniform(0.3, 3)
            next_kill = now + rngs["kill"].uniform(*KILL_EVERY)
            kill_aimed, aim_until = rngs["kill"].random() < 0.5, next_kill + 5
        if now >= next_census:
            log(_census())
            next_census = now + 10
        for index, at in list(restart_at.items()):
            if now >= at:
                workers.start(index)
                del restart_at[index]
                log(f"worker {index} started again")
        time.sleep(0.1)


def _in_flight() -> bool:
    """Whether a create, reserve or release has been sent and not answered yet."""
    return (
        Machine.objects.filter(vm_create_deadline__isnull=False).exists()
        or VgpuReservation.objects.filter(
            state__in=[VgpuReservation.State.RESERVING, VgpuReservation.State.RELEASING]
        ).exists()
    )


def _census() -> str:
    phases = Counter(Machine.objects.values_list("phase", flat=True))
    clusters = ", ".join(f"{c.name} {c.state}" for c in Cluster.objects.order_by("name"))
    return f"machines {dict(sorted(phases.items())) or 'none'}; clusters {clusters or 'none'}"


class Settling(Protocol):
    problems: list[str]
    settled_after: float | None
    held_after: float | None


def _settle(
    report: Settling,
    plane: Plane,
    seconds: float,
    log: Callable[[str], None],
    more: Callable[[], list[str]] = list,
    since: float | None = None,
    held: float | None = None,
) -> None:
    """Wait (at most `seconds`) until every invariant holds: the lifecycle's, and `more`.
    The times are counted from `since` (a monotonic moment: the last fault's end), now by
    default; `held`: seconds after `since` from which they were seen to hold all along, if
    they still do."""
    began = time.monotonic() if since is None else since
    deadline = time.monotonic() + seconds
    gone = clusters_gone()
    if gone:
        log(f"to be gone: {', '.join(sorted(gone))}")
    said = began
    first = True
    while True:
        problems = lifecycle_problems(plane, gone=gone) + more()
        if first and problems:  # what the faults' end left to do: the settling's make-up
            log(f"{len(problems)} problem(s) when the faults ended: " + "; ".join(problems[:6]))
        if not problems:
            report.held_after = held if first and held is not None else time.monotonic() - began
            time.sleep(CONNECT + LONG_READ + 2)  # still so once no late call can land
            problems = lifecycle_problems(plane, gone=gone) + more()
            if not problems:
                report.settled_after = time.monotonic() - began
                log(f"settled: every invariant holds ({report.settled_after:.0f} s)")
                return
        first = False
        now = time.monotonic()
        if now >= deadline:
            report.problems += problems
            log(f"not settled after {seconds:.0f} s: {len(problems)} problem(s)")
            return
        if now - said >= 15:
            said = now
            log(f"settling: {len(problems)} problem(s) left, e.g. {problems[0]}")
        time.sleep(0.5)  # a fine measure of the time to settle


# --- the invariants -----------------------------------------------------------------------


def clusters_gone() -> set[str]:
    """The run's clusters not active: deleted, or being deleted (to be gone)."""
    return set(CLUSTER_NAMES) - set(
        Cluster.objects.filter(state=Cluster.State.ACTIVE).values_list("name", flat=True)
    )


def lifecycle_problems(plane: Plane, *, gone: Iterable[str]) -> list[str]:
    """Everything that is not as it must be once the lifecycle settled; empty when fine."""
    state = plane.sim.state()
    vms = {
        vm["vm_id"]: vm
        for vm in state["vms"]
        if vm["status"] != "DESTROYED" and vm["name"].startswith(naming.PREFIX)
    }
    vgpus = [
        v
        for v in state["vgpus"]
        if v["status"] != "DESTROYED" and v["vgpu_name"].startswith(naming.PREFIX)
    ]
    machines = list(Machine.objects.select_related("pool__cluster").order_by("pk"))
    by_vm = {m.vm_id: m for m in machines if m.vm_id is not None}
    problems: list[str] = []

    # Money: no vGPU billed without a VM, none that no machine holds.
    if billed := plane.unassigned_billed():
        problems.append(f"unassigned vGPUs billed by the simulator: {billed}")
    for v in vgpus:
        holder = by_vm.get(v["vm_id"])
        if holder is None or not v["vgpu_name"].startswith(f"{holder.vm_name}-gpu-"):
            problems.append(
                f"vGPU {v['vgpu_name']} ({v['vgpu_id']}, {v['status']}, VM {v['vm_id']}) "
                "is held by no machine"
            )

    # Machines and pools: as asked.
    for m in machines:
        who = f"machine {m.pool.cluster.name}/{m.name}"
        if m.phase != Machine.Phase.RUNNING or m.delete_requested:
            deleting = ", deletion requested" if m.delete_requested else ""
            problems.append(f"{who} is {m.phase}{deleting}: {m.failure_message or '-'}")
        vm = vms.get(m.vm_id)
        if vm is None:
            problems.append(f"{who} has no VM in the simulator (vm_id {m.vm_id})")
        elif vm["status"] != "RUNNING":
            problems.append(f"{who}: its VM {m.vm_id} is {vm['status']}")
        attached = sorted(v["vgpu_name"] for v in vgpus if m.vm_id and v["vm_id"] == m.vm_id)
        if len(attached) != m.pool.gpu_count:
            problems.append(
                f"{who} has {len(attached)} vGPUs attached ({', '.join(attached) or 'none'}), "
                f"its pool asks for {m.pool.gpu_count}"
            )
    for pool in MachinePool.objects.select_related("cluster", "target").order_by("pk"):
        count = pool.machines.count()
        if count != pool.effective_replicas:
            problems.append(
                f"pool {pool.cluster.name}/{pool.name} has {count} machines, "
                f"not {pool.effective_replicas}"
            )

    # Deleted clusters: gone, and nothing named for them left.
    for name in sorted(gone):
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is not None:
            problems.append(
                f"cluster {name} was deleted but is still {cluster.state}: "
                f"{'; '.join(cluster.deletion_blockers) or 'no blocker recorded'}"
            )
        prefix = f"{naming.PREFIX}{name}-"
        left = [vm["name"] for vm in vms.values() if vm["name"].startswith(prefix)]
        left += [v["vgpu_name"] for v in vgpus if v["vgpu_name"].startswith(prefix)]
        if left:
            problems.append(f"deleted cluster {name} left {', '.join(sorted(left))}")

    # VMs: each one a machine's, one per name.
    for vm in vms.values():
        if vm["vm_id"] not in by_vm:
            problems.append(f"VM {vm['name']} ({vm['vm_id']}, {vm['status']}) is no machine's")
    for name, count in Counter(vm["name"] for vm in vms.values()).items():
        if count > 1:
            problems.append(f"{count} VMs named {name}")

    # The mirror: what the database shows is what whitesky has.
    live = {v["vgpu_id"]: v for v in vgpus}
    rows = VgpuReservation.objects.filter(
        state__in=[VgpuReservation.State.RESERVED, VgpuReservation.State.ATTACHED]
    )
    mirrored = {row.vgpu_id: row for row in rows}
    for vgpu_id, row in mirrored.items():
        if vgpu_id not in live:
            problems.append(f"reservation row {row.name} ({vgpu_id}) is {row.state}: not listed")
        elif row.vm_id != live[vgpu_id]["vm_id"]:
            problems.append(
                f"reservation row {row.name} says VM {row.vm_id}, whitesky {live[vgpu_id]['vm_id']}"
            )
    for vgpu_id, v in live.items():
        if vgpu_id not in mirrored:
            problems.append(f"vGPU {v['vgpu_name']} ({vgpu_id}) has no reserved or attached row")
    seen = dict(VirtualMachine.objects.values_list("vm_id", "status"))
    for vm in vms.values():
        if seen.get(vm["vm_id"]) != vm["status"]:
            problems.append(
                f"VM {vm['name']} ({vm['vm_id']}) is {vm['status']}, mirrored as "
                f"{seen.get(vm['vm_id'], 'nothing')}"
            )

    # Rows: every reserve's outcome is known by now, every release confirmed.
    for row in VgpuReservation.objects.filter(
        state__in=[VgpuReservation.State.RESERVING, VgpuReservation.State.RELEASING]
    ).order_by("pk"):
        problems.append(
            f"reservation row {row.name} (id {row.vgpu_id}, machine {row.machine_id}) is still "
            f"{row.state}, created {row.created_at:%H:%M:%S}"
        )

    problems += _audit_problems(machines)

    out = StringIO()
    try:
        call_command("gpucheck", "--orphans", stdout=out)
    except SystemExit as exc:
        if exc.code:
            problems.append(f"gpucheck --orphans exits {exc.code}:\n{out.getvalue()}")
    return problems


def _audit_problems(machines: list[Machine]) -> list[str]:
    """What the audit log shows that must never happen: a vGPU released while attached to
    the VM of a machine that still exists (or released from such a machine at all), a
    machine name used twice, and a machine's VM taken for vanished (nothing outside the
    control plane deletes VMs here)."""
    problems = []
    by_vm = {m.vm_id: m for m in machines if m.vm_id is not None}
    by_owner = {f"{m.pool.cluster.name}/{m.name}": m for m in machines}
    for event in AuditEvent.objects.filter(action="vgpu.release").order_by("pk"):
        before = event.before or {}
        at = f"{event.created_at:%H:%M:%S.%f} by {event.actor_name} ({event.reason})"
        if (holder := by_vm.get(before.get("vm_id"))) is not None:
            problems.append(
                f"vgpu.release of {before.get('name')} at {at}: it was attached to VM "
                f"{holder.vm_id} of machine {holder.pool.cluster.name}/{holder.name}, "
                "which still exists"
            )
        owner = by_owner.get(before.get("owner", ""))
        if owner is not None and event.created_at > owner.created_at:
            problems.append(
                f"vgpu.release of {before.get('name')} at {at}: a vGPU of machine "
                f"{owner.pool.cluster.name}/{owner.name}, which still exists"
            )
    # Indexes are never reused: no machine bears the name of one deleted before it was
    # made, in the same incarnation of its cluster.
    gone = AuditEvent.objects.filter(action__in=["machine.delete", "machine.force_delete"])
    for m in machines:
        reused = gone.filter(
            object_repr=f"{m.pool.cluster.name}/{m.name}",
            created_at__gt=m.pool.cluster.created_at,
            created_at__lt=m.created_at,
        ).first()
        if reused is not None:
            problems.append(
                f"machine {m.pool.cluster.name}/{m.name} reuses the name of one deleted "
                f"at {reused.created_at:%H:%M:%S.%f} ({reused.action})"
            )
    for event in AuditEvent.objects.filter(action="machine.recreate").order_by("pk"):
        problems.append(
            f"machine.recreate of {event.object_repr} at {event.created_at:%H:%M:%S}: "
            f"{event.reason} (before: {event.before}); no VM was deleted outside"
        )
    return problems


def worker_log_problems(folder: Path, expected: re.Pattern[str] = WHITESKY_FAILURE) -> list[str]:
    """Errors the workers logged that are not the faults failing as told (`expected`): a
    task that died of anything else (a database error, a bug) is a problem even if the run
    settled."""
    problems = []
    for log in sorted(folder.glob("worker*/celery.log")):
        for line in log.read_text(errors="replace").splitlines():
            if ("ERROR/" in line or "CRITICAL/" in line) and not expected.search(line):
                problems.append(f"{log.parent.name}: {line[:300]}")
    return problems


# --- the command --------------------------------------------------------------------------


@contextmanager
def test_database() -> Iterator[threading.Event]:
    """A test database of the command's own, made on the configured server and dropped at
    the end, unless the event yielded is set (a failed run's, kept for a look)."""
    from django.db import connection
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    keep = threading.Event()
    try:
        yield keep
    finally:
        test_db = connection.settings_dict["NAME"]
        connection.close()
        if keep.is_set():
            print(f"database {test_db} kept for a look (dropdb it after)", flush=True)
        else:
            connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--minutes", type=float, default=3, help="of faults, before settling")
    parser.add_argument("--settle", type=float, default=180, help="seconds to settle, at most")
    parser.add_argument("--fault-rate", type=float, default=0.04, help="per call and fault")
    parser.add_argument("--keep", action="store_true", help="keep the worker logs on success")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
    print(f"chaos seed {seed}", flush=True)

    workdir = Path(tempfile.mkdtemp(prefix=f"capvco-chaos-{seed}-"))
    with test_database() as kept:
        with WhiteskySimulator() as sim:
            report = chaos_run(
                sim=sim,
                seed=seed,
                minutes=args.minutes,
                workdir=workdir,
                settle_seconds=args.settle,
                fault_rate=args.fault_rate,
                say=lambda line: print(line, flush=True),
            )
            sim_state = sim.state()
        if report.problems:
            (workdir / "simulator-state.json").write_text(json.dumps(sim_state, indent=1))
            kept.set()
    if not report.problems and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
        report.logs = None
    print(report.summary(), flush=True)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
