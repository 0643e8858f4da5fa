"""`make run` as an operator starts it (bin/run in a shell with nothing exported, the
simulator off): each checkout's broker, cache, counters and ports are its own, a process
that dies is named, with its exit status and the end of its log, and a first run keeps the
admin's password in a file, logs no start-up probe as an error and stops at Ctrl-C within
seconds, killing nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings

from capvco_web.environment import RUN_ENV, run_env_read
from tests.checkout import APPS, ROOT, checkout_copy
from tests.servers import free_port

pytestmark = pytest.mark.e2e

CHECKOUT = (
    "manage.py",
    "requirements.txt",
    "requirements-dev.txt",
    "bin",
    *APPS,
    "templates",
    "static",
)
READY_WITHIN = 150  # seconds: migrate a new SQLite, collectstatic, start Redis, worker, web


def clean_env(**env: str) -> dict[str, str]:
    """A new shell's: none of the test run's services, so make run's own defaults."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "SIMULATOR": "0", **env}


class MakeRun:
    def __init__(self, checkout: Path, out: Path, **env: str) -> None:
        self.checkout, self.out_path = checkout, out
        self.var_dir = Path(env.get("CAPVCO_VAR_DIR") or checkout / "var")
        self.port = int(env["PORT"])
        self.env = clean_env(HOME=str(checkout.parent), **env)
        self.out = out.open("wb")
        self.process = subprocess.Popen(
            [str(checkout / "bin" / "run")],
            cwd=checkout,
            env=self.env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def said(self) -> str:
        return self.out_path.read_text(errors="replace")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, deadline: float) -> None:
        while not self.ready():
            assert self.process.poll() is None, f"make run ended:\n{self.said()}"
            assert time.monotonic() < deadline, f"make run not ready:\n{self.said()}"
            time.sleep(1)

    def python(self, code: str) -> str:
        """Python in a new shell of this checkout with the run's settings (its run.env)."""
        done = subprocess.run(
            [str(self.checkout / ".venv/bin/python"), "manage.py", "shell", "-c", code],
            cwd=self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def children(self) -> set[int]:
        """The process groups of the processes make run started (each has its own)."""
        groups = set()
        for proc in Path("/proc").iterdir():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, ValueError, IndexError):
                continue
            if int(fields[1]) == self.process.pid:
                groups.add(int(fields[2]))
        return groups

    def child(self, word: str) -> int | None:
        """The pid of the process make run started whose command line has `word`."""
        for proc in Path("/proc").iterdir():
            try:
                stat = (proc / "stat").read_text()
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, ValueError):
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) == self.process.pid and state != "Z" and word in cmdline:
                return int(proc.name)
        return None

    def interrupt(self) -> float:
        """Ctrl-C; the seconds until make run ended."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
                pytest.fail(f"make run did not stop within 60 s of Ctrl-C:\n{self.said()}")
        return time.monotonic() - started

    def close(self) -> None:
        """Whatever is left, for sure: make run and the process group of each it started."""
        for word in ("redis-server", "celery", "gunicorn"):
            if pid := self.child(word):
                os.killpg(pid, signal.SIGKILL)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.out.close()


@contextmanager
def make_run(checkout: Path, out: Path, **env: str) -> Iterator[MakeRun]:
    run = MakeRun(checkout, out, **env)
    try:
        yield run
    finally:
        run.interrupt()
        run.close()


COUNT_PROBE = "from capvco_web.counters import count; [count('whitesky_calls', 'probe', '200') for _ in range(3)]; print('ok')"  # noqa: E501
READ_PROBE = "from capvco_web.counters import counters; print(counters().read('whitesky_calls').get(('probe', '200'), 0))"  # noqa: E501


def test_two_make_runs_on_one_host_stay_apart(tmp_path: Path) -> None:
    one_checkout = checkout_copy(tmp_path / "one" / "capvco-web", CHECKOUT)
    other_checkout = checkout_copy(tmp_path / "other" / "capvco-web", CHECKOUT)
    ports = {"PORT": str(free_port())}
    with (
        make_run(one_checkout, tmp_path / "one.out", **ports) as one,
        make_run(other_checkout, tmp_path / "other.out", PORT=str(free_port())) as other,
    ):
        deadline = time.monotonic() + READY_WITHIN
        one.wait_ready(deadline)
        other.wait_ready(deadline)

        # Each its own broker: a private Redis on a socket in its var dir, never the Redis
        # on 6379 (which answers here) nor the one this test run (make test) uses.
        brokers = [run_env_read(run.var_dir / RUN_ENV)["CELERY_BROKER_URL"] for run in (one, other)]
        assert brokers == [
            f"redis+socket://{one.var_dir}/redis.sock",
            f"redis+socket://{other.var_dir}/redis.sock",
        ]
        assert settings.CELERY_BROKER_URL not in brokers
        for run in (one, other):  # listening on no TCP port at all
            port = subprocess.run(
                ["redis-cli", "-s", str(run.var_dir / "redis.sock"), "config", "get", "port"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            )
            assert port.stdout.split() == ["port", "0"]

        # A task sent in one checkout is consumed by its worker, never the other's.
        task_id = f"probe-{uuid.uuid4()}"
        one.python(
            "from capvco_web.tasks import heartbeat; "
            f"heartbeat.apply_async(task_id={task_id!r}); print('sent')"
        )
        deadline = time.monotonic() + 30
        while task_id not in (one.var_dir / "log" / "celery.log").read_text():
            assert time.monotonic() < deadline, "the task sent was not consumed in its checkout"
            time.sleep(0.5)
        assert task_id not in (other.var_dir / "log" / "celery.log").read_text()

        # Counters add up within a checkout, never across.
        one.python(COUNT_PROBE)
        assert (one.python(READ_PROBE), other.python(READ_PROBE)) == ("3", "0")

        # A second make run of a running checkout, or on a port in use, refuses at once.
        again = subprocess.run(
            [str(one_checkout / "bin/run")],
            cwd=one_checkout,
            env=clean_env(HOME=str(tmp_path), PORT=str(free_port())),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert again.returncode == 1
        assert f"another make run is using {one.var_dir}" in again.stderr
        taken = subprocess.run(
            [str(one_checkout / "bin/run")],
            cwd=one_checkout,
            env=clean_env(
                HOME=str(tmp_path), PORT=str(other.port), CAPVCO_VAR_DIR=str(tmp_path / "third")
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert taken.returncode == 1
        assert f"port {other.port} (PORT) is in use" in taken.stderr

        # Ctrl-C stops everything within seconds, the worker without being killed.
        seconds = one.interrupt()
        assert seconds < 15, one.said()
        assert one.process.returncode == 130
        assert not (one.var_dir / "redis.sock").exists()
        celery_log = (one.var_dir / "log" / "celery.log").read_text()
        assert "SIGKILL" not in celery_log and "Perhaps out of memory" not in celery_log
        assert other.ready(), "the other checkout's run went down with the first"

        # Any process but the worker dying stops the run, with its name, status and log.
        web = other.child("gunicorn")
        assert web is not None
        os.kill(web, signal.SIGTERM)
        other.process.wait(timeout=30)
        said = other.said()
        assert f"the web server (pid {web}) exited with status 0" in said
        assert "Shutting down: Master" in said  # the end of its log, quoted
        assert "stopping everything: the web server is gone" in said
        assert other.process.returncode == 1
        assert other.child("celery") is None and other.child("redis-server") is None


def test_make_run_names_a_worker_that_died_and_starts_it_again_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    env = {"PORT": str(free_port()), "CAPVCO_VAR_DIR": str(tmp_path / "var")}
    with make_run(ROOT, tmp_path / "run.out", **env) as run:
        run.wait_ready(time.monotonic() + READY_WITHIN)
        for restart in (1, 2, 3, 4):
            worker = run.child("celery")
            assert worker is not None, run.said()
            os.kill(worker, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while (again := run.child("celery")) in (None, worker) and run.process.poll() is None:
                assert time.monotonic() < deadline, run.said()
                time.sleep(0.2)
            said = run.said()
            assert (
                f"the Celery worker (pid {worker}) was killed by signal 9 (SIGKILL); "
                f"the last lines of {run.var_dir}/log/celery.log:"
            ) in said
            if restart <= 3:
                assert f"starting the Celery worker again (restart {restart} of at most 3" in said
                assert again is not None
        # The fourth death within 10 minutes stops the run, saying so.
        run.process.wait(timeout=30)
        assert run.process.returncode == 1
        assert "stopping everything: the Celery worker died 4 times in 10 minutes" in run.said()
        assert run.child("gunicorn") is None and run.child("redis-server") is None


def group_alive(group: int) -> bool:
    """A process of this group still runs (zombies aside)."""
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def slow_post(port: int, seconds: float) -> socket.socket:
    """A login POST whose body arrives over `seconds`: a request in flight meanwhile (with
    a CSRF cookie, the view reads the body, for its token, before it answers)."""
    body = b"username=admin&password=wrong"
    conn = socket.create_connection(("127.0.0.1", port), timeout=60)
    conn.sendall(
        b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Cookie: csrftoken=" + b"a" * 32 + b"\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )

    def trickle() -> None:
        for byte in range(len(body)):
            time.sleep(seconds / len(body))
            try:
                conn.sendall(body[byte : byte + 1])
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    return conn


STOPS_WITHIN = 20  # seconds from Ctrl-C until every process make run started has ended


def test_a_first_make_run_keeps_the_password_logs_no_probe_error_and_stops_at_ctrl_c(
    tmp_path: Path,
) -> None:
    var_dir = tmp_path / "var"
    env = {"PORT": str(free_port()), "CAPVCO_VAR_DIR": str(var_dir)}
    with make_run(ROOT, tmp_path / "run.out", **env) as run:
        # Probed from the start, as an operator or a load balancer would: 503 until beat ticks.
        run.wait_ready(time.monotonic() + READY_WITHIN)
        said = run.said()

        # The demo admin's password: in a file only its owner reads, named, never printed.
        password_file = var_dir / "admin-password"
        assert password_file.stat().st_mode & 0o777 == 0o600
        password = password_file.read_text().strip()
        assert f"its password is in {password_file}" in said
        assert "manage.py changepassword admin" in said
        logs = {path.name: path.read_text(errors="replace") for path in (var_dir / "log").iterdir()}
        assert password not in said
        assert not [name for name, text in logs.items() if password in text]
        signs_in = run.python(
            "from django.contrib.auth.models import User; "
            f"print(User.objects.get(username='admin').check_password({password!r}))"
        )
        assert signs_in == "True"

        # Not ready while starting is a warning, once per web worker, never a request error.
        web_log = logs["web.log"]
        assert "ERROR django.request" not in said + web_log
        assert "Traceback" not in web_log
        assert 1 <= web_log.count("WARNING capvco_web.health not ready:") <= 2, web_log

        # Ctrl-C with a request in flight: it is answered, and every process ends within
        # seconds, none killed.
        groups = run.children()
        assert len(groups) >= 3, groups  # the broker, the worker, the web server
        in_flight = slow_post(run.port, seconds=8)  # past the 2 s a web worker once had
        time.sleep(1)
        started = time.monotonic()
        os.killpg(run.process.pid, signal.SIGINT)  # Ctrl-C: to its process group
        try:
            answer = in_flight.recv(64)
        except ConnectionResetError:  # the web worker was killed with the request
            answer = b""
        run.process.wait(timeout=60)
        while (alive := {g for g in groups if group_alive(g)}) and time.monotonic() - started < 60:
            time.sleep(0.1)
        seconds = time.monotonic() - started
        assert not alive and seconds < STOPS_WITHIN, (seconds, alive, run.said())
        assert answer.startswith(b"HTTP/1.1 "), answer
        assert run.process.returncode == 130
        said = run.said()
        logs = {path.name: path.read_text(errors="replace") for path in (var_dir / "log").iterdir()}
        assert not [line for line in said.splitlines() if "SIGKILL" in line], said
        killed = {name: text for name, text in logs.items() if "SIGKILL" in text}
        assert not killed, killed
        assert "still runs after 20 s: killing it" not in said
