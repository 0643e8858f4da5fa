"""A seeded fault run of our own parts: the database, the broker, beat, the network to
whitesky, a web process and a cluster's Kubernetes API server, each failed at random points
of a busy GPU lifecycle, and the invariants of tests/chaos.py (with more of its own) after
it settles.

The run starts its own PostgreSQL (initdb on a free port), its own redis-server (the
broker, keeping nothing on disk), the whitesky simulator behind a TCP proxy it controls,
the Kubernetes simulator (the simulator's VMs join its clusters as nodes; its scheduler
runs our GPU verification Jobs and its demo pods) with each cluster's API server behind a
TCP proxy of its own, gunicorn serving the API (capvco_web/gunicorn_conf.py) and two real
Celery workers (the first runs beat), with the intervals of tests/chaos.py (a second where
production has 30 s: time runs about 30 times faster). A driver, from one seed, scales
pools through the API, changes the bounds of the A100 pools (which the autoscaler sizes
from the pods pending on them), force-deletes machines, deletes clusters and makes them
again, and now and then reserves a vGPU by hand (a leak of no machine) that a person then
releases through the API; meanwhile the clusters' CNI plugins ADD, poll and DEL pods'
SR-IOV NICs through the agent API, and pods die without a DEL (tests/chaos_nics.py). One
fault at a time, in seeded order, comes and goes:

* postgres-restart: PostgreSQL stopped (-m fast), started again seconds later;
* postgres-cut: every backend of the run's database terminated (pg_terminate_backend),
  again and again for a few seconds, those mid-transaction among them;
* broker-restart: redis-server SIGKILLed, started again empty;
* beat-stopped: the worker that runs beat started again without it, for 20 s (10 minutes
  of production time), then with it;
* beat-twice: the second worker started again with a beat of its own, for a while;
* whitesky-refused / whitesky-held: the proxy resets every connection to whitesky, or
  holds them open and silent, for seconds (the client's timeouts many times over);
* gunicorn-kill: a gunicorn worker SIGKILLed while a request of the driver is in flight;
* kube-dropped / kube-held: one cluster's API server (seeded) cut off the same ways, its
  listings paged so that a cut comes midway too.

Besides the invariants after settling (tests/chaos.py's, an autoscaled pool with the
machines its autoscaler decided, every scale, bounds edit, force delete and release
accepted carried out, and the NICs' of tests/chaos_nics.py), the mirror of the clusters'
nodes and pods is held against the clusters twice a second all along (`Clusters.check`):
no node or pod the cluster still has may leave the mirror, and no machine may be flagged
node-missing by a listing begun after its node was there. After settling, each cluster is
observed whole, its mirror what it has, no node missing.

A long run is a command:

    .venv/bin/python -m tests.chaos_ops --seed 7 --minutes 6

It prints its seed first, then each fault with what the operator saw during it (/readyz,
the dashboard's system panel, the API's answers, a cut off cluster's observation) and how
long after it /readyz and the API answered again (and the cluster was observed whole
again), and how long until every vGPU and VM whitesky billed at its end was tracked (recorded
or listed). Before the last fault the driver and the CNI plugins stop and the run settles,
so that the time to settle after the last fault, counted from its end, is the fault's own;
then the invariants after settling. About 85 s of faults make one round of every
kind: `--minutes 6` injects each four times.
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import ExitStack, suppress
from pathlib import Path

if __name__ == "__main__":  # our own servers first, then Django, with the test settings
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.servers import private_postgres, private_redis, tmpfs

    PARTS = ExitStack()
    WORKDIR = Path(tempfile.mkdtemp(prefix="capvco-chaos-ops-"))
    POSTGRES = DISK = None
    if "--embedded" in sys.argv:  # SQLite on a small disk of its own (mounting needs root)
        DISK = Path(tempfile.mkdtemp(prefix="capvco-disk-"))
        PARTS.callback(DISK.rmdir)  # once unmounted (callbacks run last first)
        PARTS.enter_context(tmpfs(DISK, 64))
        DATABASE_URL = f"sqlite:///{DISK / 'capvco.sqlite3'}"
    else:
        POSTGRES = PARTS.enter_context(private_postgres(WORKDIR / "postgres.log"))
        DATABASE_URL = POSTGRES.url
    BROKER = PARTS.enter_context(private_redis(WORKDIR / "redis.log"))
    os.environ.update(
        DATABASE_URL=DATABASE_URL, REDIS_URL=BROKER.url, CELERY_BROKER_URL=f"{BROKER.url}/0"
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()

import argparse
import copy
import random
import re
import secrets
import shutil
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
import requests
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import DatabaseError, InterfaceError, connection, transaction
from django.db.models import Q
from django.test import Client
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from capvco_web.models import AuditEvent
from capvco_web.tokens import api_token_create
from cloud.models import VirtualMachine
from clusters.models import Cluster, Machine, MachinePool
from gpus import naming
from gpus.models import ListedVgpu, VgpuReservation
from kube.gpu_verify import VERIFIED_LABEL
from kube.models import ClusterObservation, KubeNode, KubePod, MachineNode
from kube.nodes import provider_id
from tests.chaos import (
    ACTION_EVERY,
    CLUSTER_NAMES,
    CONNECT,
    READ,
    WHITESKY_FAILURE,
    WORKER_ENV,
    ChaosError,
    Driver,
    Operator,
    Workers,
    _account,
    _census,
    _settle,
    clusters_gone,
    lifecycle_problems,
    test_database,
    worker_log_problems,
)
from tests.chaos_nics import NIC_EVERY, Nics, Objects
from tests.e2e.processes import (
    broker_flush,
    environment_for_subprocess,
    gunicorn_serve,
    gunicorn_workers,
)
from tests.gpus.conftest import Plane
from tests.kube_sim import KubeSimulator, kube_server_allow
from tests.servers import PrivatePostgres, PrivateRedis, TcpProxy, disk_fill
from tests.whitesky_sim import WhiteskySimulator, whitesky_host_allow

FAULTS = (
    "postgres-restart",
    "postgres-cut",
    "broker-restart",
    "beat-stopped",
    "beat-twice",
    "whitesky-refused",
    "whitesky-held",
    "gunicorn-kill",
    "kube-dropped",
    "kube-held",
)
# The embedded default's (`--embedded`): SQLite's disk full instead of PostgreSQL's faults.
EMBEDDED_FAULTS = ("sqlite-full", *(kind for kind in FAULTS if not kind.startswith("postgres")))
BEAT_STOPPED_SECONDS = 20.0  # 10 minutes of production time (intervals 30 times longer)
DOWN_SECONDS = (2.0, 6.0)  # how long a server is down, or the network cut
FAULT_GAP = (1.0, 3.0)  # between one fault's end and the next one's start
WATCH_EVERY = 1.0
SYNC_INTERVAL = float(WORKER_ENV["OBSERVE_INTERVAL_SECONDS"])  # production's 30 s
RECOVERY_LIMIT = 60.0
# The workers' and the web's heartbeat: /readyz says beat is missing within seconds. The
# clusters' API servers with the timeouts of whitesky's; a machine's node has seconds to
# join, so that a node missing is judged within the run.
ENV = {
    **WORKER_ENV,
    "HEARTBEAT_INTERVAL_SECONDS": "1",
    "KUBE_CONNECT_TIMEOUT_SECONDS": str(CONNECT),
    "KUBE_READ_TIMEOUT_SECONDS": str(READ),
    "KUBE_LIST_PAGE_SIZE": "2",  # listings of several pages, cut midway too
    "NODE_JOIN_TIMEOUT_SECONDS": "8",
    "GPU_ADVERTISE_TIMEOUT_SECONDS": "8",
    # Each GPU node verified by a Job of ours (the simulator runs it), then labelled so:
    # the simulator's demo pods ask for verified nodes, and run on them.
    "GPU_VERIFY": "true",
    # The A100 pools follow their pending pods (the simulator's demo pods), and a machine
    # no pod uses goes after 20 s (10 minutes of production time).
    "AUTOSCALE_INTERVAL_SECONDS": "1",
    "AUTOSCALE_IDLE_MINUTES": str(20 / 60),
    "AUTOSCALE_DOWN_DELAY_AFTER_UP_MINUTES": str(20 / 60),
    # A NIC whose pod died without DEL goes within seconds; a queued one is resumed so.
    "SRIOV_RECLAIM_INTERVAL_SECONDS": "1",
    "SRIOV_RECLAIM_GRACE_SECONDS": "10",
    "SRIOV_QUEUE_RESUME_INTERVAL_SECONDS": "1",
}
AUTOSCALED = CLUSTER_NAMES
# What the CNI plugins did (tests/chaos_nics.py), by the first word of what it says.
NIC_ACTS = {"ADD": "NIC ADD", "poll": "NIC poll", "DEL": "NIC DEL", "pod": "pod gone without DEL"}
KUBE_EVERY = 0.5  # how often the mirror and the flags are checked against the clusters
# What a worker may log while our own parts fail, besides whitesky failing: the database
# or the broker gone, and whitesky out of reach.
OUR_PARTS_FAILURE = re.compile(
    rf"{WHITESKY_FAILURE.pattern}|raised unexpected: (OperationalError|InterfaceError)\(|"
    r"leak ledger: .*\): (OperationalError|InterfaceError)\(|"
    r"consumer: Cannot connect to redis|beat: Connection error|"
    r"Couldn't apply scheduled task [\w-]+: Error \d+ connecting|"
    r"Connection to broker lost|Error on stopping Pidbox|Couldn't ack '[\w-]+', reason:network"
)
# A refusal that says what is wrong: the database's 503 (capvco_web.middleware), and the
# node agent's (the VM's NIC queue busy, whitesky or the cluster's Kubernetes out of
# reach: asked again later).
REFUSAL_CODES = (
    "database_unavailable",
    "vm_busy",
    "whitesky_unavailable",
    "kubernetes_unavailable",
)


@dataclass
class FaultRecord:
    kind: str
    began: float
    what: str = ""
    cluster: str = ""
    """The cluster whose API server a kube fault cut off."""
    ended: float | None = None
    readyz: Counter[str] = field(default_factory=Counter)
    """/readyz during the fault: "200" or "503 database, broker" (its failing checks)."""
    panel: str = ""
    api: Counter[str] = field(default_factory=Counter)
    """The driver's calls during the fault: "2xx", "503 database_unavailable", "refused"."""
    recovered_after: float | None = None
    """Seconds after the fault ended until /readyz and the API answered 200 again."""
    tracked_after: float | None = None
    """Seconds after the fault ended until every vGPU and VM whitesky billed then (and
    still bills) was recorded by us or listed, shown with its cost (`untracked`)."""
    first_held_after: float | None = None
    """The last fault's (on a settled run): seconds after it ended until every invariant
    first held (the lifecycle may go on and break one again: autoscaling, a NIC reclaimed)."""
    held_after: float | None = None
    """The last fault's: seconds after it ended from which every invariant held, as far as
    it was looked at while recovering."""
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        took = f"{self.ended - self.began:4.1f} s" if self.ended is not None else "   -  "
        back = f"{self.recovered_after:.1f} s" if self.recovered_after is not None else "never"
        tracked = f"{self.tracked_after:.1f} s" if self.tracked_after is not None else "never"
        seen = ", ".join(f"{k} x{n}" for k, n in sorted(self.readyz.items())) or "-"
        api = ", ".join(f"{k} x{n}" for k, n in sorted(self.api.items())) or "-"
        return (
            f"{self.kind:17} {took} ({self.what})  readyz [{seen}]  panel [{self.panel or '-'}]  "
            f"API [{api}]  answering again {back} after, all billed tracked {tracked} after"
        )


def worst(figures: list[float | None]) -> float | None:
    """The largest, or None when one is missing (never) or there is none."""
    if not figures or None in figures:
        return None
    return max(f for f in figures if f is not None)


@dataclass
class Quiet:
    """The settling before the last fault (tests.chaos.Settling)."""

    problems: list[str] = field(default_factory=list)
    settled_after: float | None = None
    held_after: float | None = None


@dataclass
class OpsReport:
    seed: int
    minutes: float
    kinds: tuple[str, ...] = FAULTS
    faults: list[FaultRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    actions: Counter[str] = field(default_factory=Counter)
    settled_after: float | None = None
    """After the last fault's end (which came on a run settled first: `quiet_after`)."""
    held_after: float | None = None
    quiet_after: float | None = None
    """Seconds from the driver's stop, before the last fault, until every invariant held:
    the lifecycle carrying out the requests it had accepted."""
    logs: Path | None = None
    kube: str = ""

    def table(self) -> str:
        """Per kind of fault: how many, violations, worst recovery, and worst time until
        all that whitesky bills was tracked again (in seconds and in sync intervals)."""
        lines = [
            f"{'fault':17} {'n':>3} {'violations':>10} {'answering again (max)':>22} "
            f"{'all billed tracked (max)':>26}"
        ]
        for kind in self.kinds:
            records = [r for r in self.faults if r.kind == kind]
            back = worst([r.recovered_after for r in records])
            tracked = worst([r.tracked_after for r in records])
            shown = "never" if tracked is None else f"{tracked:.1f} s"
            if tracked is not None:
                shown += f" ({tracked / SYNC_INTERVAL:.1f} iv)"
            violations = sum(len(r.problems) for r in records)
            lines.append(
                f"{kind:17} {len(records):3} {violations:10} "
                f"{'never' if back is None else f'{back:.1f} s':>22} {shown:>26}"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        lines = [
            f"chaos-ops seed {self.seed}: {self.minutes:g} min of faults, "
            + ", ".join(f"{n} {what}" for what, n in sorted(self.actions.items())),
            self.table(),
        ]
        if self.quiet_after is not None:
            lines.append(
                f"the driver stopped before the last fault: every invariant held "
                f"{self.quiet_after:.1f} s later (its requests carried out)"
            )
        if self.settled_after is not None and self.held_after is not None:
            last = self.faults[-1]
            first = last.first_held_after
            first = first if first is not None else self.held_after
            lines.append(
                f"settled after the last fault ({last.kind}): every invariant first held "
                f"{first:.1f} s ({first / SYNC_INTERVAL:.1f} sync intervals) after its end; "
                f"all along from {self.held_after:.1f} s, still so {self.settled_after:.1f} s "
                "after it, once no late call could land"
            )
        if self.kube:
            lines.append(self.kube)
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s) (seed {self.seed}):")
            lines += [f"  - {problem}" for problem in self.problems]
            lines.append(f"replay: .venv/bin/python -m tests.chaos_ops --seed {self.seed}")
        if self.logs is not None:
            lines.append(f"logs: {self.logs}")
        return "\n".join(lines)


# --- the web, as a person and an operator reach it ----------------------------------------


@dataclass
class Answer:
    status_code: int
    data: Any


class WebApi:
    """The API through gunicorn, with a person's token; every 5xx is judged: a 503 that
    names what is wrong is a refusal, anything else (a 500, a traceback) a problem."""

    def __init__(self, base: str, report: OpsReport) -> None:
        self.base = base
        self.session = requests.Session()
        self.report = report
        self.seen: Counter[str] = Counter()

    def as_person(self, user: User) -> WebApi:
        """This client, sending `user`'s new API token (Operator's `api`)."""
        _, token = api_token_create(user=user, name="chaos", actor=user)
        self.session.headers["Authorization"] = f"Bearer {token}"
        return self

    def post(self, url: str, data: dict[str, Any], format: str = "json") -> Answer:
        return self._send("POST", url, data)

    def patch(self, url: str, data: dict[str, Any], format: str = "json") -> Answer:
        return self._send("PATCH", url, data)

    def get(self, url: str) -> Answer:
        return self._send("GET", url, None)

    def _send(self, method: str, url: str, data: dict[str, Any] | None) -> Answer:
        try:
            response = self.session.request(method, f"{self.base}{url}", json=data, timeout=15)
        except requests.RequestException as exc:
            self.seen["no answer"] += 1
            raise ChaosError(f"{method} {url}: no answer ({type(exc).__name__})") from exc
        return Answer(response.status_code, self.judge(method, url, response))

    def judge(self, method: str, url: str, response: requests.Response) -> Any:
        """Counts the answer; a 5xx that does not say what is wrong, or a traceback, is a
        problem. Answers the body, parsed."""
        body = response.text
        try:
            parsed = response.json()
        except ValueError:
            parsed = body[:300]
        code = parsed.get("code") if isinstance(parsed, dict) else None
        if response.status_code >= 500:
            self.seen[f"{response.status_code} {code or '-'}"] += 1
            if response.status_code != 503 or code not in REFUSAL_CODES:
                self.report.problems.append(
                    f"{method} {url}: {response.status_code} to a person: {body[:300]}"
                )
        else:
            self.seen[f"{response.status_code // 100}xx"] += 1
        if "Traceback" in body:
            self.report.problems.append(f"{method} {url}: a traceback to a person: {body[:300]}")
        return parsed

    def person(self, method: str, url: str, data: dict[str, Any] | None) -> Answer:
        """A person's call that must be accepted: ChaosError when it is not."""
        answer = self._send(method.upper(), url, data)
        if answer.status_code >= 300:
            raise ChaosError(f"{method.upper()} {url}: {answer.status_code} {answer.data}")
        return answer


class Watch:
    """What the operator sees: /readyz and the dashboard's system panel, as staff."""

    def __init__(self, base: str) -> None:
        self.base = base
        staff, _ = User.objects.get_or_create(
            username="chaos-watch", defaults={"is_staff": True, "is_superuser": True}
        )
        client = Client()
        client.force_login(staff)
        self.cookies = {"sessionid": client.cookies["sessionid"].value}

    def readyz(self) -> str:
        try:
            response = requests.get(f"{self.base}/readyz", cookies=self.cookies, timeout=5)
        except requests.RequestException as exc:
            return f"no answer ({type(exc).__name__})"
        if response.status_code == 200:
            return "200"
        try:
            checks = response.json().get("checks", {})
        except ValueError:  # no session to read: the database's own refusal, as a page
            unavailable = "The database is unavailable" in response.text
            return f"{response.status_code} {'database page' if unavailable else '(not JSON)'}"
        failing = sorted(name for name, c in checks.items() if c["status"] != "ok")
        return f"{response.status_code} {', '.join(failing) or 'no checks shown'}"

    def panel(self) -> str:
        """The system panel's failing rows, or the page's own refusal."""
        try:
            response = requests.get(f"{self.base}/", cookies=self.cookies, timeout=10)
        except requests.RequestException as exc:
            return f"no answer ({type(exc).__name__})"
        if response.status_code != 200:
            unavailable = "The database is unavailable" in response.text
            return f"{response.status_code}{' database unavailable' if unavailable else ''}"
        section = response.text.split('id="system-status"', 1)[-1].split("</section>", 1)[0]
        failing = re.findall(r"<td>(\w+)</td>\s*<td class=\"fail\">", section)
        return f"failing: {', '.join(failing)}" if failing else "all ok"

    def kube(self, api: WebApi, cluster: str) -> str:
        """The cluster's Kubernetes observation, as the API shows it to the operator."""
        pk = Cluster.objects.filter(name=cluster).values_list("pk", flat=True).first()
        try:
            shown = api.get(f"/api/v1/clusters/{pk}/").data if pk else None
        except ChaosError:
            shown = None
        if not isinstance(shown, dict):
            return f"cluster {cluster}: not shown"
        if shown["kube_observation_complete"]:
            return f"cluster {cluster}: observed"
        if shown["kube_observation_started_at"] is None:
            return f"cluster {cluster}: not observed yet"
        return f"cluster {cluster}: observation failing ({shown['kube_observation_error'][:80]})"

    def answering(self, api: WebApi) -> bool:
        try:
            pools = api.get("/api/v1/pools/").status_code
        except ChaosError:
            return False
        return pools == 200 and self.readyz() == "200"


# --- the clusters' Kubernetes, each API server behind a proxy of its own ----------------


class Clusters:
    """The run's workload clusters: the Kubernetes simulator, whose nodes are the VMs of the
    whitesky simulator joined as kubeadm would, and whose scheduler places pods (its demo
    pods, the GPU verification Jobs'), each cluster's API server reached through a TCP
    proxy of its own; and what the control plane's mirror of them must never do while an
    API server is cut off: lose a node or a pod the cluster still has, or say a machine's
    node is missing when the cluster had it before the listing that judged."""

    def __init__(self, kube: KubeSimulator) -> None:
        self.kube = kube
        self.sim = {name: kube.cluster(name) for name in CLUSTER_NAMES}
        port = int(kube.base_url.rsplit(":", 1)[1])
        self.proxies = {name: TcpProxy(port) for name in CLUSTER_NAMES}
        for proxy in self.proxies.values():
            kube_server_allow(self.origin(proxy))
        self.seen: dict[int, set[str]] = {}
        """Per cluster (its pk: a cluster made again is another), the uids mirrored once."""
        self.said: set[str] = set()
        """What was found wrong (each is told once)."""
        self.looks = 0
        self.most: Counter[str] = Counter()
        """The most nodes and pods one look found mirrored."""

    def kubeconfigs(self) -> dict[str, str]:
        """Each cluster's kubeconfig, naming its proxy as the API server."""
        found = {}
        for name, sim in self.sim.items():
            config = copy.deepcopy(sim.kubeconfig)
            proxied = self.origin(self.proxies[name])
            config["clusters"][0]["cluster"]["server"] = sim.server.replace(
                self.kube.base_url, proxied
            )
            found[name] = yaml.safe_dump(config)
        return found

    @staticmethod
    def origin(proxy: TcpProxy) -> str:
        """The API server as the kubeconfig names it (TLS passes through the proxy)."""
        return f"https://127.0.0.1:{proxy.port}"

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()

    def objects(self, name: str) -> dict[str, tuple[str, datetime, str]]:
        """The cluster's nodes and pods now, read from its API server (not through the
        proxy): by uid, what it is ("node x", "pod ns/x"), when it was made and (a node)
        its providerID."""
        found = {}
        for kind, path in (("node", "/api/v1/nodes"), ("pod", "/api/v1/pods")):
            answer = self.sim[name].call("GET", path)
            answer.raise_for_status()
            for item in answer.json()["items"]:
                meta = item["metadata"]
                where = f"{meta['namespace']}/" if kind == "pod" else ""
                made = datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
                provider_id = (item.get("spec") or {}).get("providerID", "")
                found[meta["uid"]] = (f"{kind} {where}{meta['name']}", made, provider_id)
        return found

    def check(self) -> list[str]:
        """One look: the mirror and the flags in one snapshot of the database, then the
        clusters as they are (read after it: an object there now was there then). Answers
        what it found wrong that no look found before."""
        with transaction.atomic():
            if connection.vendor == "postgresql":  # SQLite's transaction is one snapshot
                connection.cursor().execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            observed = Cluster.objects.filter(state=Cluster.State.ACTIVE).exclude(kubeconfig="")
            active = dict(observed.values_list("pk", "name"))
            mirrored: dict[int, set[str]] = defaultdict(set)
            for model in (KubeNode, KubePod):
                for cluster_id, uid in model.objects.filter(cluster__in=active).values_list(
                    "cluster", "uid"
                ):
                    mirrored[cluster_id].add(uid)
            flagged = list(
                MachineNode.objects.filter(
                    missing=True, machine__pool__cluster__in=active
                ).values_list(
                    "machine__pool__cluster",
                    "machine__name",
                    "machine__pool__site__location__name",
                    "machine__vm_id",
                    "missing_reason",
                )
            )
            judged = dict(
                ClusterObservation.objects.filter(cluster__in=active).values_list(
                    "cluster", "last_complete_at"
                )
            )
        self.seen = {pk: uids for pk, uids in self.seen.items() if pk in active}
        there = {pk: self.objects(name) for pk, name in active.items()}
        found = []
        for pk, name in active.items():
            seen = self.seen.setdefault(pk, set())
            for uid in sorted(seen - mirrored[pk]):
                if uid in there[pk]:
                    found.append(f"{name}: the mirror lost {there[pk][uid][0]}, still there")
            seen |= mirrored[pk]
        looked = Counter(
            what.split()[0] for objects in there.values() for what, _, _ in objects.values()
        )
        self.most |= looked
        self.looks += 1
        nodes = {
            (pk, what.removeprefix("node "), provider_id): made
            for pk, objects in there.items()
            for what, made, provider_id in objects.values()
            if what.startswith("node ")
        }
        for pk, machine, location, vm_id, reason in flagged:
            # Its node: named after its VM, and with its VM's providerID (an old VM's node,
            # of the same name, is not its node).
            node = (pk, naming.vm_name(active[pk], machine), provider_id(location, vm_id))
            made = nodes.get(node)
            listed = judged.get(pk)
            # Its timestamp is to the second, rounded down.
            if made is not None and listed is not None and made + timedelta(seconds=1) < listed:
                found.append(
                    f"{active[pk]}: machine {machine} flagged node missing ({reason}), its node "
                    f"there since {made:%H:%M:%S}, before the listing of {listed:%H:%M:%S.%f}"
                )
        new = [what for what in found if what not in self.said]
        self.said.update(new)
        return new

    def unsettled(self) -> list[str]:
        """What is not as it must be once the clusters settled: each observed cluster's
        last observation complete, its mirror what the cluster has, no node missing."""
        problems = []
        observed = Cluster.objects.filter(state=Cluster.State.ACTIVE).exclude(kubeconfig="")
        for cluster in observed:
            observation = ClusterObservation.objects.filter(cluster=cluster).first()
            if observation is None or not observation.complete:
                error = observation.error if observation else "none yet"
                problems.append(f"cluster {cluster.name}: Kubernetes not observed ({error})")
                continue
            there = {what for what, _, _ in self.objects(cluster.name).values()}
            mirrored = {f"node {n}" for n in cluster.kube_nodes.values_list("name", flat=True)}
            mirrored |= {
                f"pod {ns}/{n}" for ns, n in cluster.kube_pods.values_list("namespace", "name")
            }
            if there != mirrored:
                problems.append(
                    f"cluster {cluster.name}: mirrored {sorted(mirrored - there)[:4]} gone, "
                    f"{sorted(there - mirrored)[:4]} not mirrored"
                )
            for name, reason in MachineNode.objects.filter(
                machine__pool__cluster=cluster, missing=True
            ).values_list("machine__name", "missing_reason"):
                problems.append(f"machine {cluster.name}/{name}: node missing ({reason})")
        return problems


def kube_census() -> str:
    nodes = KubeNode.objects.all()
    gpus = nodes.filter(gpu_capacity__gt=0)
    verified = gpus.filter(labels__contains={VERIFIED_LABEL: "true"}).count()
    pods = Counter(KubePod.objects.values_list("phase", flat=True))
    return (
        f"kubernetes: {nodes.count()} nodes ({gpus.count()} with GPUs, {verified} verified), "
        f"pods {dict(sorted(pods.items())) or 'none'}"
    )


# --- the faults ---------------------------------------------------------------------------


class Parts:
    """Our own parts, each of which a fault fails and mends."""

    def __init__(
        self,
        postgres: PrivatePostgres | None,
        disk: Path | None,
        broker: PrivateRedis,
        proxy: TcpProxy,
        clusters: Clusters,
        workers: Workers,
        web_master: int,
    ) -> None:
        self.postgres = postgres
        self.disk = disk
        """SQLite's disk (the embedded default), filled by sqlite-full."""
        self.filler: Path | None = None
        self.broker = broker
        self.proxy = proxy
        self.clusters = clusters
        self.workers = workers
        self.web_master = web_master

    def cut_connections(self) -> tuple[int, int]:
        """Terminate every backend of the run's database but this one's; answers how many,
        and how many of them were mid-transaction."""
        assert self.postgres is not None
        with psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{self.postgres.port}/postgres", autocommit=True
        ) as admin:
            rows = admin.execute(
                "SELECT pid, state FROM pg_stat_activity WHERE datname = %s",
                [connection.settings_dict["NAME"]],
            ).fetchall()
            for pid, _ in rows:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        busy = sum(1 for _, state in rows if state in ("active", "idle in transaction"))
        return len(rows), busy

    def gunicorn_kill(self, rng: random.Random) -> str:
        workers = gunicorn_workers(self.web_master)
        if not workers:
            return "no gunicorn worker to kill"
        pid = rng.choice(workers)
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL gunicorn worker {pid}"


def fault_plan(rng: random.Random, rounds: int, kinds: tuple[str, ...] = FAULTS) -> list[str]:
    """`rounds` rounds of every kind of fault, each round in its own seeded order."""
    plan: list[str] = []
    for _ in range(rounds):
        plan += rng.sample(kinds, k=len(kinds))
    return plan


class Storm:
    """The driver's actions and one fault at a time, watched."""

    def __init__(
        self,
        report: OpsReport,
        parts: Parts,
        sim: WhiteskySimulator,
        driver: Driver,
        nics: Nics,
        api: WebApi,
        watch: Watch,
        rngs: dict[str, random.Random],
        log: Callable[[str], None],
    ) -> None:
        self.report = report
        self.sim = sim
        self.parts = parts
        self.driver = driver
        self.nics = nics
        self.next_nic = 0.0
        self.api = api
        self.watch = watch
        self.rngs = rngs
        self.log = log
        self.accepted_scales: dict[int, int] = {}
        self.accepted_bounds: dict[int, tuple[int, int]] = {}
        self.accepted_deletes: set[int] = set()
        self.accepted_releases: set[str] = set()
        """The vGPU ids of the releases accepted."""
        self.cuts_until = 0.0
        self.next_kube_check = 0.0
        self.quiet = False
        """The driver and the CNI plugins stopped: only the fault and the checks go on."""
        self.invariants: Callable[[], list[str]] | None = None
        """Every invariant's problems; looked at while the last fault recovers."""

    def act(self, record: FaultRecord | None) -> None:
        """One action of the driver; refused is fine, as long as it is said clearly."""
        before = Counter(self.api.seen)
        try:
            kind, what = self.driver.act()
        except (ChaosError, DatabaseError, InterfaceError, BrokerError) as exc:
            connection.close()  # a connection cut or a server gone: the next one is new
            self.report.actions["refused"] += 1
            self.log(f"refused: {str(exc).splitlines()[0][:160]}")
            kind = ""
        else:
            self.report.actions[kind] += 1
            self.log(what)
            self._remember(kind, what)
        if record is not None:
            record.api.update(Counter(self.api.seen) - before)
            if not kind and self.api.seen == before:
                record.api["refused in this process"] += 1

    def _remember(self, kind: str, what: str) -> None:
        """The requests accepted (2xx, or the service returned): carried out by the end."""
        if kind == "scale":
            cluster, pool, _, _, replicas = (
                what.removeprefix("scale ").removeprefix("again: ").replace("/", " ").split()
            )
            row = MachinePool.objects.get(cluster__name=cluster, name=pool)
            self.accepted_scales[row.pk] = int(replicas)
        elif kind == "bounds":
            cluster, pool, low, high = what.removeprefix("bounds ").replace("/", " ").split()
            row = MachinePool.objects.get(cluster__name=cluster, name=pool)
            self.accepted_bounds[row.pk] = (int(low), int(high))
        elif kind == "release":
            self.accepted_releases.add(what.rsplit("(", 1)[1].rstrip(")"))
        elif kind == "force_delete":
            name = what.split()[1]
            cluster, machine = name.split("/")
            self.accepted_deletes |= set(
                Machine.objects.filter(pool__cluster__name=cluster, name=machine).values_list(
                    "pk", flat=True
                )
            )

    def run(self, plan: list[str], settle: Callable[[], None]) -> None:
        """The faults of `plan`, the driver busy all along but for the last one: before
        it the driver stops and the run settles (`settle`), so that what the last fault
        leaves to settle is its own."""
        rng = self.rngs["fault"]
        now = time.monotonic()
        next_action = now + self.rngs["act"].uniform(*ACTION_EVERY)
        next_census = now + 10
        for n, kind in enumerate(plan):
            if n == len(plan) - 1:
                self.quiet = True
                self.log("the driver stops before the last fault: settling")
                settle()
            gap_end = time.monotonic() + rng.uniform(*FAULT_GAP)
            while time.monotonic() < gap_end:
                next_action, next_census = self._tick(None, next_action, next_census)
            record = FaultRecord(kind=kind, began=time.monotonic())
            self.report.faults.append(record)
            until = self._begin(record, rng)
            self.log(f"fault {kind}: {record.what}")
            next_watch = time.monotonic()
            while time.monotonic() < until:
                if time.monotonic() >= next_watch:
                    record.readyz[self.watch.readyz()] += 1
                    self._read(record)
                    next_watch = time.monotonic() + WATCH_EVERY
                if kind == "postgres-cut" and time.monotonic() >= self.cuts_until:
                    cut, busy = self.parts.cut_connections()
                    record.what += f" {cut}({busy} busy)"
                    self.cuts_until = time.monotonic() + rng.uniform(0.2, 0.8)
                next_action, next_census = self._tick(record, next_action, next_census)
            record.panel = self.watch.panel()
            if record.cluster:
                record.panel += f"; {self.watch.kube(self.api, record.cluster)}"
            record.problems += misnamed(record)
            self._end(record)
            record.ended = time.monotonic()
            self._recover(record)
            self.log(record.line())

    def strays_release(self, sim: WhiteskySimulator) -> None:
        """The person asks for the release of every vGPU reserved by hand still there,
        once the API shows it (they are billed: settling needs them gone)."""
        deadline = time.monotonic() + RECOVERY_LIMIT
        while time.monotonic() < deadline:
            left = [
                v["vgpu_id"]
                for v in sim.state()["vgpus"]
                if v["vgpu_name"].startswith("hand-") and v["status"] != "DESTROYED"
            ]
            if not set(left) - self.accepted_releases:
                return
            for reservation in self.driver.strays_shown():
                with suppress(ChaosError):
                    self.driver.operator.release(reservation)
                    self.accepted_releases.add(str(reservation.vgpu_id))
                    self.log(f"release {reservation.name} ({reservation.vgpu_id})")
            time.sleep(1)
        self.report.problems.append(f"vGPUs reserved by hand not shown to release: {left}")

    def _read(self, record: FaultRecord) -> None:
        """A person reading the pools through the API, whatever the driver does."""
        before = Counter(self.api.seen)
        with suppress(ChaosError):
            self.api.get("/api/v1/pools/")
        record.api.update(Counter(self.api.seen) - before)

    def _tick(
        self, record: FaultRecord | None, next_action: float, next_census: float
    ) -> tuple[float, float]:
        now = time.monotonic()
        for index, code in self.parts.workers.exited():
            problem = f"worker {index} exited by itself (status {code})"
            (record.problems if record else self.report.problems).append(problem)
            self.parts.workers.running.pop(index)
            self.parts.workers.start(index)
        if now >= next_action and not self.quiet:
            self.act(record)
            soon = self.driver.second_thought is not None or self.driver.then_delete is not None
            every = (0.2, 1.0) if soon else ACTION_EVERY
            next_action = time.monotonic() + self.rngs["act"].uniform(*every)
        if now >= next_census:
            try:
                self.log(f"{_census()}; {kube_census()}; {self.nics.census()}")
            except DatabaseError:
                connection.close()
            next_census = now + 10
        if now >= self.next_kube_check:
            self.kube_check(record)
            self.next_kube_check = time.monotonic() + KUBE_EVERY
        if now >= self.next_nic and not self.quiet:
            self.nic_act()
            self.next_nic = time.monotonic() + self.rngs["nics"].uniform(*NIC_EVERY)
        time.sleep(0.05)
        return next_action, next_census

    def active(self) -> tuple[dict[str, int], Objects]:
        """The active clusters' pks by name, and their objects as their API servers have
        them now (read after the rows)."""
        active = dict(
            Cluster.objects.filter(state=Cluster.State.ACTIVE)
            .exclude(kubeconfig="")
            .values_list("name", "pk")
        )
        return active, {name: self.parts.clusters.objects(name) for name in active}

    def nic_act(self) -> None:
        """One step of the clusters' CNI plugins; refused is fine, said clearly."""
        try:
            active, objects = self.active()
            what = self.nics.act(self.rngs["nics"], objects, active)
            self.log(what)
            if kind := NIC_ACTS.get(what.split()[0]):
                self.report.actions[kind] += 1
        except (ChaosError, DatabaseError, InterfaceError, requests.RequestException) as exc:
            connection.close()
            self.log(f"NIC refused: {str(exc).splitlines()[0][:160]}")

    def nics_unsettled(self) -> list[str]:
        """The NICs' invariants, the plugins still polling their queued ADDs."""
        self.nics.settle_tick()
        _, objects = self.active()
        return self.nics.problems(objects)

    def kube_check(self, record: FaultRecord | None) -> None:
        """The mirror against the clusters; what is wrong is the fault's (or the run's)."""
        try:
            found = self.parts.clusters.check()
        except (DatabaseError, InterfaceError):
            connection.close()  # the database's own fault: the next look
            return
        except requests.RequestException as exc:
            self.log(f"the clusters could not be read: {exc}")
            return
        for problem in found:
            self.log(f"kubernetes: {problem}")
        (record.problems if record else self.report.problems).extend(found)

    def _begin(self, record: FaultRecord, rng: random.Random) -> float:
        """Fail the part; answers when to mend it."""
        parts, kind, now = self.parts, record.kind, time.monotonic()
        down = rng.uniform(*DOWN_SECONDS)
        if kind == "sqlite-full":
            assert parts.disk is not None
            parts.filler = disk_fill(parts.disk)
            record.what = f"SQLite's disk full for {down:.1f} s"
        elif kind == "postgres-restart":
            assert parts.postgres is not None
            parts.postgres.stop("fast")
            record.what = f"PostgreSQL stopped for {down:.1f} s"
        elif kind == "postgres-cut":
            record.what = f"backends terminated for {down:.1f} s:"
            self.cuts_until = now
        elif kind == "broker-restart":
            parts.broker.kill()
            record.what = f"redis-server killed, empty again in {down:.1f} s"
        elif kind == "beat-stopped":
            parts.workers.kill(0)
            parts.workers.start(0, beat=False)
            down = BEAT_STOPPED_SECONDS
            record.what = f"no beat for {down:.0f} s"
        elif kind == "beat-twice":
            parts.workers.kill(1)
            parts.workers.start(1, beat=True)
            down = rng.uniform(5, 10)
            record.what = f"two beats for {down:.1f} s"
        elif kind in ("whitesky-refused", "whitesky-held"):
            parts.proxy.set("refuse" if kind == "whitesky-refused" else "hold")
            record.what = f"whitesky {parts.proxy.mode} for {down:.1f} s"
        elif kind in ("kube-dropped", "kube-held"):
            record.cluster = rng.choice(CLUSTER_NAMES)
            mode = "refuse" if kind == "kube-dropped" else "hold"
            parts.clusters.proxies[record.cluster].set(mode)
            record.what = f"{record.cluster}'s API server: {mode} for {down:.1f} s"
        elif kind == "gunicorn-kill":
            # Mid-request: the kill comes within the driver's request, sent at once.
            delay = rng.uniform(0.0, 0.08)
            killed: list[str] = []
            timer = threading.Timer(delay, lambda: killed.append(parts.gunicorn_kill(rng)))
            timer.start()
            self._read(record) if self.quiet else self.act(record)
            timer.join()
            record.what = f"{killed[0]} {delay * 1000:.0f} ms into a request"
            down = 0.5
        return now + down

    def _end(self, record: FaultRecord) -> None:
        parts, kind = self.parts, record.kind
        if kind == "sqlite-full":
            assert parts.filler is not None
            parts.filler.unlink()
        elif kind == "postgres-restart":
            assert parts.postgres is not None
            parts.postgres.start()
        elif kind == "broker-restart":
            parts.broker.start()
        elif kind == "beat-stopped":
            parts.workers.kill(0)
            parts.workers.start(0)
        elif kind == "beat-twice":
            parts.workers.kill(1)
            parts.workers.start(1)
        elif kind in ("whitesky-refused", "whitesky-held"):
            parts.proxy.set("pass")
        elif record.cluster:
            parts.clusters.proxies[record.cluster].set("pass")

    def _recover(self, record: FaultRecord) -> None:
        """Until /readyz and the API answer 200 again, and a cut off cluster (still there)
        is observed whole by a listing begun after its API server came back; and until
        every vGPU and VM whitesky bills at the fault's end is tracked (`untracked`)."""
        assert record.ended is not None
        ended_at = timezone.now()
        billed = self.sim.state()  # whitesky's whole listing, taken after the fault ended
        deadline = record.ended + RECOVERY_LIMIT
        lost: list[str] = []
        said: list[str] = []
        while time.monotonic() < deadline:
            if record.tracked_after is None:
                if now_lost := untracked(self.sim, billed):
                    lost = now_lost
                else:
                    record.tracked_after = time.monotonic() - record.ended
                    if lost:  # what it waited for
                        self.log(
                            f"all billed tracked {record.tracked_after:.1f} s after the fault; "
                            f"before, not: {'; '.join(lost[:4])}"
                        )
            if (
                record.recovered_after is None
                and self.watch.answering(self.api)
                and self._observed_since(record, ended_at)
            ):
                record.recovered_after = time.monotonic() - record.ended
            if self.invariants is not None:
                if problems := self._invariants_now():
                    record.held_after = None  # not yet, or no longer
                    if problems != said:  # the make-up of the time to settle
                        self.log(
                            f"{time.monotonic() - record.ended:.1f} s after the last fault, "
                            f"{len(problems)} problem(s): " + "; ".join(problems[:4])
                        )
                        said = problems
                elif record.held_after is None:
                    record.held_after = time.monotonic() - record.ended
                    if record.first_held_after is None:
                        record.first_held_after = record.held_after
            if (
                record.recovered_after is not None
                and record.tracked_after is not None
                and (self.invariants is None or record.held_after is not None)
            ):
                return
            self.kube_check(record)
            time.sleep(0.2)
        if record.recovered_after is None:
            record.problems.append(f"not answering {RECOVERY_LIMIT:.0f} s after {record.kind}")
        if record.tracked_after is None:
            record.problems.append(
                f"billed, not tracked {RECOVERY_LIMIT:.0f} s after {record.kind}: {lost}"
            )

    def _invariants_now(self) -> list[str]:
        assert self.invariants is not None
        try:
            return self.invariants()
        except (DatabaseError, InterfaceError):
            connection.close()
            return ["the database cannot be read"]

    @staticmethod
    def _observed_since(record: FaultRecord, moment: datetime) -> bool:
        if not record.cluster:
            return True
        cluster = Cluster.objects.filter(name=record.cluster, state=Cluster.State.ACTIVE)
        if not cluster.exists():
            return True  # deleted meanwhile: nothing to observe
        return ClusterObservation.objects.filter(
            cluster__in=cluster, complete=True, last_complete_at__gt=moment
        ).exists()


# --- the invariants of its own ------------------------------------------------------------


def untracked(sim: WhiteskySimulator, billed: dict[str, Any]) -> list[str]:
    """The vGPUs and the VMs named by us in whitesky's listing `billed` (taken after a
    fault ended) that whitesky still bills and we neither recorded (a reservation or
    machine of ours, by id, or by the name it was recorded under before its call) nor
    listed (shown with its cost, owned or a leak): money lost track of. While
    the database cannot be read, that is what it answers: nothing is known tracked then."""
    now = sim.state()
    vgpus_now = {v["vgpu_id"] for v in now["vgpus"] if v["status"] != "DESTROYED"}
    vms_now = {vm["vm_id"] for vm in now["vms"] if vm["status"] != "DESTROYED"}
    vgpus = {
        v["vgpu_id"]: v["vgpu_name"]
        for v in billed["vgpus"]
        if v["status"] != "DESTROYED" and v["vgpu_id"] in vgpus_now
    }
    vms = {
        vm["vm_id"]: vm["name"]
        for vm in billed["vms"]
        if vm["status"] != "DESTROYED"
        and vm["vm_id"] in vms_now
        and vm["name"].startswith(naming.PREFIX)
    }
    try:
        recorded = VgpuReservation.objects.filter(
            Q(vgpu_id__in=vgpus) | Q(name__in=vgpus.values())
        ).values_list("vgpu_id", "name")
        known = {vgpu_id for vgpu_id, _ in recorded} | {
            vgpu_id for vgpu_id, name in vgpus.items() if name in {n for _, n in recorded}
        }
        known |= set(ListedVgpu.objects.filter(vgpu_id__in=vgpus).values_list("vgpu_id", flat=True))
        known_vms = set(Machine.objects.filter(vm_id__in=vms).values_list("vm_id", flat=True))
        # A machine's row is there before its VM's create is sent: the VM of its name.
        named = {
            naming.vm_name(cluster, machine)
            for cluster, machine in Machine.objects.values_list("pool__cluster__name", "name")
        }
        known_vms |= {vm_id for vm_id, name in vms.items() if name in named}
        known_vms |= set(
            VirtualMachine.objects.filter(vm_id__in=vms).values_list("vm_id", flat=True)
        )
    except (DatabaseError, InterfaceError):
        connection.close()
        return ["the database cannot be read"]
    return [
        f"vGPU {name} ({vgpu_id})" for vgpu_id, name in vgpus.items() if vgpu_id not in known
    ] + [f"VM {name} ({vm_id})" for vm_id, name in vms.items() if vm_id not in known_vms]


def misnamed(record: FaultRecord) -> list[str]:
    """What the operator was told wrongly during the fault: whitesky out of reach said as
    beat failing (beat sends its tick all along; the workers may be busy waiting out
    whitesky's timeouts, which `workers` says); SQLite's disk full said as anything but the
    database (its beat and workers run on: only their stamps cannot be written)."""
    if record.kind == "sqlite-full":
        failing = [set(seen.split(" ", 1)[-1].split(", ")) for seen in record.readyz]
        others = sorted({name for names in failing for name in names} - {"database", "200"})
        wrong = [f"the disk full shown as {', '.join(others)} failing"] if others else []
        if not any("database" in names for names in failing):
            wrong.append(f"the disk full never shown as the database: {dict(record.readyz)}")
        return wrong
    if not record.kind.startswith("whitesky"):
        return []
    said = [seen for seen in record.readyz if "beat" in seen.split(" ", 1)[-1].split(", ")]
    if "beat" in record.panel.removeprefix("failing: ").split(", "):
        said.append(f"panel {record.panel}")
    return [f"whitesky out of reach shown as beat failing: {', '.join(said)}"] if said else []


# Done once per object: a second one is a duplicate (a request carried out twice). A
# cluster's removal of the VMs carrying its name records each on the cluster, the VM named
# in the reason: the reason is part of what must be unique. An attempt whose outcome was
# not known (its answer lost: `after` says the error, and it is sent again) is not done.
ONCE = ("machine.delete", "machine.force_delete", "cluster.delete", "vm.delete", "vgpu.release")


def requests_problems(storm: Storm, sim: WhiteskySimulator) -> list[str]:
    """Every request accepted before a fault is carried out after it."""
    problems = []
    for pk, replicas in sorted(storm.accepted_scales.items()):
        pool = MachinePool.objects.filter(pk=pk).select_related("cluster").first()
        if pool is not None and pool.replicas != replicas:
            problems.append(
                f"pool {pool.cluster.name}/{pool.name} has replicas {pool.replicas}: "
                f"the last scale accepted asked for {replicas}"
            )
    for pk, bounds in sorted(storm.accepted_bounds.items()):
        pool = MachinePool.objects.filter(pk=pk).select_related("cluster").first()
        if pool is not None and (pool.autoscale_min, pool.autoscale_max) != bounds:
            problems.append(
                f"pool {pool.cluster.name}/{pool.name} autoscales within "
                f"{pool.autoscale_min}..{pool.autoscale_max}: the last edit accepted asked "
                f"for {bounds[0]}..{bounds[1]}"
            )
    live = {v["vgpu_id"]: v for v in sim.state()["vgpus"] if v["status"] != "DESTROYED"}
    for vgpu_id in sorted(storm.accepted_releases & set(live)):
        problems.append(f"release of {live[vgpu_id]['vgpu_name']} accepted, still reserved")
    if left := Machine.objects.filter(pk__in=storm.accepted_deletes):
        problems.append(
            "force deletes accepted, machines still there: "
            + ", ".join(f"{m.pool.cluster.name}/{m.name}" for m in left)
        )
    return problems


def audit_duplicates() -> list[str]:
    done = AuditEvent.objects.filter(action__in=ONCE).exclude(after__has_key="error")
    seen = Counter(done.values_list("action", "object_type", "object_id", "reason"))
    return [
        f"audit: {action} of {kind} {object_id} ({reason}) recorded {n} times"
        for (action, kind, object_id, reason), n in sorted(seen.items())
        if n > 1
    ]


# --- the run ------------------------------------------------------------------------------


def ops_run(
    *,
    sim: WhiteskySimulator,
    kube: KubeSimulator,
    postgres: PrivatePostgres | None,
    disk: Path | None,
    broker: PrivateRedis,
    seed: int,
    minutes: float,
    workdir: Path,
    settle_seconds: float = 120,
    say: Callable[[str], None] = print,
) -> OpsReport:
    """One run; the database must be empty and the simulator fresh, and Django's database
    and broker those given: PostgreSQL's `postgres`, or SQLite's on `disk` (the embedded
    default's faults)."""
    kinds = FAULTS if postgres is not None else EMBEDDED_FAULTS
    report = OpsReport(seed=seed, minutes=minutes, kinds=kinds, logs=workdir)
    rngs = {name: random.Random(f"{seed}:{name}") for name in ("setup", "act", "fault", "nics")}
    start = time.monotonic()

    def log(message: str) -> None:
        say(f"[{time.monotonic() - start:7.1f}s] {message}")

    sim.reset()
    broker_flush()
    proxy = TcpProxy(int(sim.base_url.rsplit(":", 1)[1]))
    whitesky_host_allow(proxy.origin)
    account = _account(sim, rngs["setup"], origin=proxy.origin)
    kube.reset()
    clusters = Clusters(kube)
    workers = Workers(workdir, ENV)
    plan = fault_plan(rngs["fault"], rounds=max(1, round(minutes * 60 / 85)), kinds=kinds)
    log(f"faults: {', '.join(plan)}")
    try:
        with gunicorn_serve(workdir, environment_for_subprocess(**ENV)) as server:
            api = WebApi(server.base, report)
            operator = Operator(
                account,
                api=api.as_person,
                kubeconfigs=clusters.kubeconfigs(),
                autoscaled=AUTOSCALED,
            )
            for name in CLUSTER_NAMES:
                log(operator.cluster_create(name, rngs["setup"]))
            watch = Watch(server.base)
            parts = Parts(postgres, disk, broker, proxy, clusters, workers, server.pid)
            driver = Driver(operator, rngs["act"], strays=sim)
            workers.start(0)
            workers.start(1)
            _wait(lambda: watch.answering(api), RECOVERY_LIMIT, "ready before the faults")
            log("ready: /readyz answers 200")
            nics = Nics(server.base, sim, kube, clusters.sim, api.person, api.judge)
            storm = Storm(report, parts, sim, driver, nics, api, watch, rngs, log)
            plane = Plane(sim=sim, account=account)

            def unsettled() -> list[str]:
                return clusters.unsettled() + storm.nics_unsettled()

            def settle_before_last() -> None:
                """The driver's requests carried out, the vGPUs reserved by hand released."""
                quiet = Quiet()
                storm.strays_release(sim)
                _settle(quiet, plane, settle_seconds, log, unsettled)
                report.quiet_after = quiet.held_after
                report.problems += [f"before the last fault: {p}" for p in quiet.problems]
                gone = clusters_gone()
                storm.invariants = lambda: lifecycle_problems(plane, gone=gone) + unsettled()

            storm.run(plan, settle_before_last)
            log("faults over: settling")
            last = report.faults[-1]
            _settle(
                report, plane, settle_seconds, log, unsettled, since=last.ended,
                held=last.held_after,
            )  # fmt: skip
            storm.kube_check(None)
            report.kube = f"kubernetes: {clusters.looks} looks at the mirror, at most " + ", ".join(
                f"{n} {what}s" for what, n in sorted(clusters.most.items())
            )
            report.problems += requests_problems(storm, sim)
            report.problems += audit_duplicates()
            for record in report.faults:
                report.problems += [f"{record.kind}: {p}" for p in record.problems]
    finally:
        workers.stop()
        proxy.close()
        clusters.close()
    report.problems += worker_log_problems(workdir, expected=OUR_PARTS_FAILURE)
    report.problems += web_log_problems(workdir / "gunicorn.log")
    return report


def web_log_problems(log: Path) -> list[str]:
    """A request the web answered with a server error (Django logs it at ERROR, with its
    traceback), whoever sent it: the watch's too."""
    return [
        f"gunicorn: {line[:300]}"
        for line in log.read_text(errors="replace").splitlines()
        if "ERROR django" in line or line.startswith("Traceback")
    ]


def _wait(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise ChaosError(f"not {what} within {seconds:.0f} s")
        time.sleep(0.2)


# --- the command --------------------------------------------------------------------------


def kube_sim_args(sim: WhiteskySimulator) -> tuple[str, ...]:
    """The Kubernetes simulator's: the VMs of `sim` join as nodes, pods are placed."""
    return ("--join-whitesky", sim.base_url, "--join-interval", "1", "--schedule")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--minutes", type=float, default=6, help="of faults, before settling")
    parser.add_argument("--settle", type=float, default=120, help="seconds to settle, at most")
    parser.add_argument("--keep", action="store_true", help="keep the logs on success")
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="the embedded default: SQLite on a small disk of its own (mounting it needs "
        "root), its disk filled instead of PostgreSQL's faults",
    )
    return parser.parse_args()


@contextmanager
def embedded_database() -> Iterator[None]:
    """The embedded default's database, made as `make run` makes it (its file is new)."""
    call_command("migrate", verbosity=0)
    yield


def main(
    args: argparse.Namespace,
    postgres: PrivatePostgres | None,
    disk: Path | None,
    broker: PrivateRedis,
    workdir: Path,
) -> OpsReport:
    seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
    print(f"chaos-ops seed {seed}", flush=True)
    with (
        test_database() if postgres is not None else embedded_database(),
        WhiteskySimulator() as sim,
        KubeSimulator(extra_args=kube_sim_args(sim)) as kube,
    ):
        report = ops_run(
            sim=sim,
            kube=kube,
            postgres=postgres,
            disk=disk,
            broker=broker,
            seed=seed,
            minutes=args.minutes,
            workdir=workdir,
            settle_seconds=args.settle,
            say=lambda line: print(line, flush=True),
        )
    return report


if __name__ == "__main__":
    ARGS = arguments()
    with PARTS:  # stopped before the logs are judged kept: they copy theirs there
        REPORT = main(ARGS, POSTGRES, DISK, BROKER, WORKDIR)
    if not REPORT.problems and not ARGS.keep:
        shutil.rmtree(WORKDIR, ignore_errors=True)
        REPORT.logs = None
    print(REPORT.summary(), flush=True)
    sys.exit(1 if REPORT.problems else 0)
