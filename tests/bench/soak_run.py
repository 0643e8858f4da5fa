"""Soak of `make run`: bin/run as an operator starts it (a clean environment: no broker,
database or Redis named, so the embedded defaults), with the simulators and the demo, for
`--minutes` (30 by default). Every minute it checks that every process of the run lives,
that `/readyz` answers 200, how far the demo got (machines running and joined, pods with
NICs), the worker's restarts, and that no log shows a traceback. It ends with the figures
(minutes up, restarts, demo state, worker RSS at the start and the end) and exits 1 when
any check failed.

    .venv/bin/python -m tests.bench.soak_run --minutes 30

It runs in a var dir of its own (a temporary one unless `--var-dir`), on free ports, so it
stays apart from any `make run` of this checkout and from `make test`; it stops the run
with SIGTERM at the end, as Ctrl-C would, and says how long that took.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
# The demo (clusters/management/commands/demo_seed.py, sriov/.../demo_sriov.py): 3 machines
# (2 A100, 1 T4), 3 pods with NICs.
DEMO_MACHINES = 3
DEMO_NICS = 3
# The processes bin/run keeps running, by a word of their command line.
PROCESSES = ("redis-server", "simulator.whitesky", "simulator.kube", "celery", "gunicorn")
DEMO_STATE = """
import json
from clusters.models import Machine
from sriov.models import PodNic
machines = Machine.objects.filter(pool__cluster__name="demo")
print(json.dumps({
    "running": machines.filter(phase="running").count(),
    "joined": machines.filter(phase="running", node_state__joined_at__isnull=False).count(),
    "machines": machines.count(),
    "nics_attached": PodNic.objects.filter(state="attached").count(),
}))
"""


def clean_environment(var_dir: Path, ports: dict[str, int]) -> dict[str, str]:
    """What a new shell has: none of the test suite's services, so the embedded defaults."""
    drop = {"CELERY_BROKER_URL", "DATABASE_URL", "REDIS_URL", "CACHE_URL", "DJANGO_SETTINGS_MODULE"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("CAPVCO_")}
    env.update({name: str(port) for name, port in ports.items()})
    env["CAPVCO_VAR_DIR"] = str(var_dir)
    return env


def children(pid: int) -> dict[str, int]:
    """The processes bin/run started that still live, by the word of PROCESSES they run."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) != pid or state == "Z":
            continue
        for word in PROCESSES:
            if word in cmdline:
                found[word] = int(proc.name)
    return found


def group_rss_mib(pgid: int) -> float:
    """Resident memory of every process of a process group (the worker, its pool, beat)."""
    total_kib = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            status = (proc / "status").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        total_kib += int(match.group(1)) if match else 0
    return total_kib / 1024


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def demo_state(env: dict[str, str]) -> dict[str, int]:
    shown = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "manage.py", "shell", "-c", DEMO_STATE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if shown.returncode != 0:
        return {"error": 1}
    state: dict[str, int] = json.loads(shown.stdout.strip().splitlines()[-1])
    return state


def converged(state: dict[str, int]) -> bool:
    return (
        state.get("joined") == DEMO_MACHINES == state.get("machines")
        and state.get("nics_attached") == DEMO_NICS
    )


def tracebacks(log_dir: Path) -> dict[str, int]:
    return {
        log.name: log.read_text(errors="replace").count("Traceback (most recent call last)")
        for log in sorted(log_dir.glob("*.log"))
        if log.read_text(errors="replace").count("Traceback (most recent call last)")
    }


@dataclass
class Soak:
    minutes_up: int = 0
    failures: list[str] = field(default_factory=list)
    restarts: int = 0
    converged_at_minute: int | None = None
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    demo: dict[str, int] = field(default_factory=dict)
    stop_seconds: float = 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--var-dir", type=Path, default=None)
    parser.add_argument("--check-every", type=float, default=60, help="seconds")
    args = parser.parse_args()

    var_dir = (args.var_dir or Path(tempfile.mkdtemp(prefix="capvco-soak-"))).resolve()
    ports = {"PORT": free_port(), "SIM_PORT": free_port(), "KUBE_SIM_PORT": free_port()}
    env = clean_environment(var_dir, ports)
    out_path = var_dir / "make-run.out"
    var_dir.mkdir(parents=True, exist_ok=True)
    print(f"soak of make run for {args.minutes} min: var dir {var_dir}, ports {ports}")
    out = out_path.open("wb")
    run = subprocess.Popen(
        [str(ROOT / "bin/run")],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    soak = Soak()
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while readyz(ports["PORT"]) != 200:
            if run.poll() is not None or time.monotonic() > deadline:
                print(out_path.read_text(errors="replace"))
                print("make run did not become ready")
                return 1
            time.sleep(2)
        started = time.monotonic()
        worker = children(run.pid).get("celery")
        soak.rss_start_mib = group_rss_mib(worker) if worker else 0.0
        print(f"ready; worker RSS {soak.rss_start_mib:.0f} MiB")
        for minute in range(1, args.minutes + 1):
            time.sleep(max(0.0, started + minute * args.check_every - time.monotonic()))
            alive = children(run.pid)
            seen.update(alive.values())
            missing = [p for p in PROCESSES if p not in alive]
            status = readyz(ports["PORT"])
            soak.demo = demo_state(env)
            said = out_path.read_text(errors="replace")
            soak.restarts = said.count("starting the Celery worker again")
            if soak.converged_at_minute is None and converged(soak.demo):
                soak.converged_at_minute = minute
            worker = alive.get("celery")
            rss = group_rss_mib(worker) if worker else 0.0
            traces = tracebacks(var_dir / "log")
            print(
                f"minute {minute}: make run {'up' if run.poll() is None else 'GONE'}, "
                f"missing {missing or 'none'}, /readyz {status}, demo {soak.demo}, "
                f"restarts {soak.restarts}, worker RSS {rss:.0f} MiB, "
                f"tracebacks {traces or 'none'}",
                flush=True,
            )
            problems = []
            if run.poll() is not None:
                problems.append("make run ended")
            if missing:
                problems.append(f"not running: {missing}")
            if status != 200:
                problems.append(f"/readyz answered {status}")
            if traces:
                problems.append(f"tracebacks in {traces}")
            if problems:
                soak.failures.append(f"minute {minute}: {'; '.join(problems)}")
                if run.poll() is not None:
                    break
            soak.minutes_up = minute
            soak.rss_end_mib = rss
        if soak.converged_at_minute is None:
            soak.failures.append(f"the demo never converged: {soak.demo}")
    finally:
        stopping = time.monotonic()
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)  # as Ctrl-C: bin/run stops everything in order
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                soak.failures.append("make run did not stop within 60 s of SIGTERM")
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        soak.stop_seconds = time.monotonic() - stopping
        out.close()
        leftover = sorted(pid for pid in seen if Path(f"/proc/{pid}").exists())
        if leftover:
            soak.failures.append(f"left running after the stop: {leftover}")
    print(
        json.dumps(
            {
                "minutes_up": soak.minutes_up,
                "restarts": soak.restarts,
                "demo": soak.demo,
                "demo_converged_at_minute": soak.converged_at_minute,
                "worker_rss_mib": {
                    "start": round(soak.rss_start_mib),
                    "end": round(soak.rss_end_mib),
                },
                "stop_seconds": round(soak.stop_seconds, 1),
                "failures": soak.failures,
            },
            indent=2,
        )
    )
    print(f"make run's output: {out_path}; logs: {var_dir / 'log'}")
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
