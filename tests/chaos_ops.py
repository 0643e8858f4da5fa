"""A seeded fault run of our own parts: the database, the broker, beat, the network to
whitesky and a web process, each failed at random points of a busy GPU lifecycle, and the
invariants of tests/chaos.py (with more of its own) after it settles.

The run starts its own PostgreSQL (initdb on a free port), its own redis-server (the
broker, keeping nothing on disk), the whitesky simulator behind a TCP proxy it controls,
gunicorn serving the API (capvco_web/gunicorn_conf.py) and two real Celery workers (the
first runs beat), with the intervals of tests/chaos.py (a second where production has 30 s:
time runs about 30 times faster). A driver, from one seed, scales pools through the API,
force-deletes machines and deletes clusters and makes them again; one fault at a time, in
seeded order, comes and goes:

* postgres-restart: PostgreSQL stopped (-m fast), started again seconds later;
* postgres-cut: every backend of the run's database terminated (pg_terminate_backend),
  again and again for a few seconds, those mid-transaction among them;
* broker-restart: redis-server SIGKILLed, started again empty;
* beat-stopped: the worker that runs beat started again without it, for 20 s (10 minutes
  of production time), then with it;
* beat-twice: the second worker started again with a beat of its own, for a while;
* whitesky-refused / whitesky-held: the proxy resets every connection to whitesky, or
  holds them open and silent, for seconds (the client's timeouts many times over);
* gunicorn-kill: a gunicorn worker SIGKILLed while a request of the driver is in flight.

A long run is a command:

    .venv/bin/python -m tests.chaos_ops --seed 7 --minutes 6

It prints its seed first, then each fault with what the operator saw during it (/readyz,
the dashboard's system panel, the API's answers) and how long after it /readyz and the API
answered again; then the invariants after settling. About 70 s of faults make one round of
every kind: `--minutes 6` injects each at least five times.
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import ExitStack, suppress
from pathlib import Path

if __name__ == "__main__":  # our own servers first, then Django, with the test settings
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.servers import private_postgres, private_redis

    PARTS = ExitStack()
    WORKDIR = Path(tempfile.mkdtemp(prefix="capvco-chaos-ops-"))
    POSTGRES = PARTS.enter_context(private_postgres(WORKDIR / "postgres.log"))
    BROKER = PARTS.enter_context(private_redis(WORKDIR / "redis.log"))
    os.environ.update(
        DATABASE_URL=POSTGRES.url, REDIS_URL=BROKER.url, CELERY_BROKER_URL=f"{BROKER.url}/0"
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()

import argparse
import random
import re
import secrets
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import requests
from django.contrib.auth.models import User
from django.db import DatabaseError, InterfaceError, connection
from django.test import Client
from kombu.exceptions import OperationalError as BrokerError

from capvco_web.models import AuditEvent
from capvco_web.tokens import api_token_create
from clusters.models import Machine, MachinePool
from tests.chaos import (
    ACTION_EVERY,
    CLUSTER_NAMES,
    WHITESKY_FAILURE,
    WORKER_ENV,
    ChaosError,
    Driver,
    Operator,
    Workers,
    _account,
    _census,
    _settle,
    test_database,
    worker_log_problems,
)
from tests.e2e.processes import (
    broker_flush,
    environment_for_subprocess,
    gunicorn_serve,
    gunicorn_workers,
)
from tests.gpus.conftest import Plane
from tests.servers import PrivatePostgres, PrivateRedis, TcpProxy
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
)
BEAT_STOPPED_SECONDS = 20.0  # 10 minutes of production time (intervals 30 times longer)
DOWN_SECONDS = (2.0, 6.0)  # how long a server is down, or the network cut
FAULT_GAP = (1.0, 3.0)  # between one fault's end and the next one's start
WATCH_EVERY = 1.0
RECOVERY_LIMIT = 60.0
# The workers' and the web's heartbeat: /readyz says beat is missing within seconds.
ENV = {**WORKER_ENV, "HEARTBEAT_INTERVAL_SECONDS": "1"}
# What a worker may log while our own parts fail, besides whitesky failing: the database
# or the broker gone, and whitesky out of reach.
OUR_PARTS_FAILURE = re.compile(
    rf"{WHITESKY_FAILURE.pattern}|raised unexpected: (OperationalError|InterfaceError)\(|"
    r"leak ledger: .*\): (OperationalError|InterfaceError)\(|"
    r"consumer: Cannot connect to redis|beat: Connection error|"
    r"Couldn't apply scheduled task [\w-]+: Error \d+ connecting|"
    r"Connection to broker lost|Error on stopping Pidbox|Couldn't ack '[\w-]+', reason:network"
)
# A refusal that says what is wrong: the database's 503 (capvco_web.middleware).
REFUSAL_CODES = ("database_unavailable",)


@dataclass
class FaultRecord:
    kind: str
    began: float
    what: str = ""
    ended: float | None = None
    readyz: Counter[str] = field(default_factory=Counter)
    """/readyz during the fault: "200" or "503 database, broker" (its failing checks)."""
    panel: str = ""
    api: Counter[str] = field(default_factory=Counter)
    """The driver's calls during the fault: "2xx", "503 database_unavailable", "refused"."""
    recovered_after: float | None = None
    """Seconds after the fault ended until /readyz and the API answered 200 again."""
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        took = f"{self.ended - self.began:4.1f} s" if self.ended is not None else "   -  "
        back = f"{self.recovered_after:.1f} s" if self.recovered_after is not None else "never"
        seen = ", ".join(f"{k} x{n}" for k, n in sorted(self.readyz.items())) or "-"
        api = ", ".join(f"{k} x{n}" for k, n in sorted(self.api.items())) or "-"
        return (
            f"{self.kind:17} {took} ({self.what})  readyz [{seen}]  panel [{self.panel or '-'}]  "
            f"API [{api}]  answering again {back} after"
        )


@dataclass
class OpsReport:
    seed: int
    minutes: float
    faults: list[FaultRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    actions: Counter[str] = field(default_factory=Counter)
    settled_after: float | None = None
    logs: Path | None = None

    def table(self) -> str:
        """Per kind of fault: how many, violations, worst recovery."""
        lines = [f"{'fault':17} {'n':>3} {'violations':>10} {'answering again (max)':>22}"]
        for kind in FAULTS:
            records = [r for r in self.faults if r.kind == kind]
            backs = [r.recovered_after for r in records if r.recovered_after is not None]
            worst = f"{max(backs):.1f} s" if len(backs) == len(records) and backs else "never"
            violations = sum(len(r.problems) for r in records)
            lines.append(f"{kind:17} {len(records):3} {violations:10} {worst:>22}")
        return "\n".join(lines)

    def summary(self) -> str:
        lines = [
            f"chaos-ops seed {self.seed}: {self.minutes:g} min of faults, "
            + ", ".join(f"{n} {what}" for what, n in sorted(self.actions.items())),
            self.table(),
        ]
        if self.settled_after is not None:
            lines.append(f"settled {self.settled_after:.0f} s after the last fault")
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

    def get(self, url: str) -> Answer:
        return self._send("GET", url, None)

    def _send(self, method: str, url: str, data: dict[str, Any] | None) -> Answer:
        try:
            response = self.session.request(method, f"{self.base}{url}", json=data, timeout=15)
        except requests.RequestException as exc:
            self.seen["no answer"] += 1
            raise ChaosError(f"{method} {url}: no answer ({type(exc).__name__})") from exc
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
        return Answer(response.status_code, parsed)


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

    def answering(self, api: WebApi) -> bool:
        try:
            pools = api.get("/api/v1/pools/").status_code
        except ChaosError:
            return False
        return pools == 200 and self.readyz() == "200"


# --- the faults ---------------------------------------------------------------------------


class Parts:
    """Our own parts, each of which a fault fails and mends."""

    def __init__(
        self,
        postgres: PrivatePostgres,
        broker: PrivateRedis,
        proxy: TcpProxy,
        workers: Workers,
        web_master: int,
    ) -> None:
        self.postgres = postgres
        self.broker = broker
        self.proxy = proxy
        self.workers = workers
        self.web_master = web_master

    def cut_connections(self) -> tuple[int, int]:
        """Terminate every backend of the run's database but this one's; answers how many,
        and how many of them were mid-transaction."""
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


def fault_plan(rng: random.Random, rounds: int) -> list[str]:
    """`rounds` rounds of every kind of fault, each round in its own seeded order."""
    plan: list[str] = []
    for _ in range(rounds):
        plan += rng.sample(FAULTS, k=len(FAULTS))
    return plan


class Storm:
    """The driver's actions and one fault at a time, watched."""

    def __init__(
        self,
        report: OpsReport,
        parts: Parts,
        driver: Driver,
        api: WebApi,
        watch: Watch,
        rngs: dict[str, random.Random],
        log: Callable[[str], None],
    ) -> None:
        self.report = report
        self.parts = parts
        self.driver = driver
        self.api = api
        self.watch = watch
        self.rngs = rngs
        self.log = log
        self.accepted_scales: dict[int, int] = {}
        self.accepted_deletes: set[int] = set()
        self.cuts_until = 0.0

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
        elif kind == "force_delete":
            name = what.split()[1]
            cluster, machine = name.split("/")
            self.accepted_deletes |= set(
                Machine.objects.filter(pool__cluster__name=cluster, name=machine).values_list(
                    "pk", flat=True
                )
            )

    def run(self, plan: list[str]) -> None:
        rng = self.rngs["fault"]
        now = time.monotonic()
        next_action = now + self.rngs["act"].uniform(*ACTION_EVERY)
        next_census = now + 10
        for kind in plan:
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
            self._end(record)
            record.ended = time.monotonic()
            self._recover(record)
            self.log(record.line())

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
        if now >= next_action:
            self.act(record)
            soon = self.driver.second_thought is not None or self.driver.then_delete is not None
            every = (0.2, 1.0) if soon else ACTION_EVERY
            next_action = time.monotonic() + self.rngs["act"].uniform(*every)
        if now >= next_census:
            try:
                self.log(_census())
            except DatabaseError:
                connection.close()
            next_census = now + 10
        time.sleep(0.05)
        return next_action, next_census

    def _begin(self, record: FaultRecord, rng: random.Random) -> float:
        """Fail the part; answers when to mend it."""
        parts, kind, now = self.parts, record.kind, time.monotonic()
        down = rng.uniform(*DOWN_SECONDS)
        if kind == "postgres-restart":
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
        elif kind == "gunicorn-kill":
            # Mid-request: the kill comes within the driver's request, sent at once.
            delay = rng.uniform(0.0, 0.08)
            killed: list[str] = []
            timer = threading.Timer(delay, lambda: killed.append(parts.gunicorn_kill(rng)))
            timer.start()
            self.act(record)
            timer.join()
            record.what = f"{killed[0]} {delay * 1000:.0f} ms into a request"
            down = 0.5
        return now + down

    def _end(self, record: FaultRecord) -> None:
        parts, kind = self.parts, record.kind
        if kind == "postgres-restart":
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

    def _recover(self, record: FaultRecord) -> None:
        assert record.ended is not None
        deadline = record.ended + RECOVERY_LIMIT
        while time.monotonic() < deadline:
            if self.watch.answering(self.api):
                record.recovered_after = time.monotonic() - record.ended
                return
            time.sleep(0.2)
        record.problems.append(f"not answering {RECOVERY_LIMIT:.0f} s after {record.kind}")


# --- the invariants of its own ------------------------------------------------------------

# Done once per object: a second one is a duplicate (a request carried out twice). A
# cluster's removal of the VMs carrying its name records each on the cluster, the VM named
# in the reason: the reason is part of what must be unique. An attempt whose outcome was
# not known (its answer lost: `after` says the error, and it is sent again) is not done.
ONCE = ("machine.delete", "machine.force_delete", "cluster.delete", "vm.delete", "vgpu.release")


def requests_problems(storm: Storm) -> list[str]:
    """Every request accepted before a fault is carried out after it."""
    problems = []
    for pk, replicas in sorted(storm.accepted_scales.items()):
        pool = MachinePool.objects.filter(pk=pk).select_related("cluster").first()
        if pool is not None and pool.replicas != replicas:
            problems.append(
                f"pool {pool.cluster.name}/{pool.name} has replicas {pool.replicas}: "
                f"the last scale accepted asked for {replicas}"
            )
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
    postgres: PrivatePostgres,
    broker: PrivateRedis,
    seed: int,
    minutes: float,
    workdir: Path,
    settle_seconds: float = 120,
    say: Callable[[str], None] = print,
) -> OpsReport:
    """One run; the database must be empty and the simulator fresh, and Django's database
    and broker those given."""
    report = OpsReport(seed=seed, minutes=minutes, logs=workdir)
    rngs = {name: random.Random(f"{seed}:{name}") for name in ("setup", "act", "fault")}
    start = time.monotonic()

    def log(message: str) -> None:
        say(f"[{time.monotonic() - start:7.1f}s] {message}")

    sim.reset()
    broker_flush()
    proxy = TcpProxy(int(sim.base_url.rsplit(":", 1)[1]))
    whitesky_host_allow(proxy.origin)
    account = _account(sim, rngs["setup"], origin=proxy.origin)
    workers = Workers(workdir, ENV)
    plan = fault_plan(rngs["fault"], rounds=max(1, round(minutes * 60 / 70)))
    log(f"faults: {', '.join(plan)}")
    try:
        with gunicorn_serve(workdir, environment_for_subprocess(**ENV)) as server:
            api = WebApi(server.base, report)
            operator = Operator(account, api=api.as_person)
            for name in CLUSTER_NAMES:
                log(operator.cluster_create(name, rngs["setup"]))
            watch = Watch(server.base)
            parts = Parts(postgres, broker, proxy, workers, server.pid)
            driver = Driver(operator, rngs["act"])
            workers.start(0)
            workers.start(1)
            _wait(lambda: watch.answering(api), RECOVERY_LIMIT, "ready before the faults")
            log("ready: /readyz answers 200")
            storm = Storm(report, parts, driver, api, watch, rngs, log)
            storm.run(plan)
            log("faults over: settling")
            _settle(report, Plane(sim=sim, account=account), settle_seconds, log)
            report.problems += requests_problems(storm)
            report.problems += audit_duplicates()
            for record in report.faults:
                report.problems += [f"{record.kind}: {p}" for p in record.problems]
    finally:
        workers.stop()
        proxy.close()
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


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--minutes", type=float, default=6, help="of faults, before settling")
    parser.add_argument("--settle", type=float, default=120, help="seconds to settle, at most")
    parser.add_argument("--keep", action="store_true", help="keep the logs on success")
    return parser.parse_args()


def main(
    args: argparse.Namespace, postgres: PrivatePostgres, broker: PrivateRedis, workdir: Path
) -> OpsReport:
    seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
    print(f"chaos-ops seed {seed}", flush=True)
    with test_database(), WhiteskySimulator() as sim:
        report = ops_run(
            sim=sim,
            postgres=postgres,
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
        REPORT = main(ARGS, POSTGRES, BROKER, WORKDIR)
    if not REPORT.problems and not ARGS.keep:
        shutil.rmtree(WORKDIR, ignore_errors=True)
        REPORT.logs = None
    print(REPORT.summary(), flush=True)
    sys.exit(1 if REPORT.problems else 0)
