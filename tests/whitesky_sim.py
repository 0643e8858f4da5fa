"""The whitesky simulator for tests (pytest plugin) and for scripts (``WhiteskySimulator``).

``tests/conftest.py`` loads this module with ``pytest_plugins = ["tests.whitesky_sim"]``.
The ``whitesky_sim`` fixture gives one simulator process per test session, reset before
each test. Scripts (benchmarks, the demo) use the class directly::

    with WhiteskySimulator() as sim:
        requests.get(f"{sim.api_url}/me", headers={"Authorization": f"Bearer {sim.token()}"})

The control API it drives is described in docs/simulator-contract.md.

A started simulator's address is added to WHITESKY_ALLOWED_HOSTS (the settings of this
process and the environment of the processes it starts later), as `make run` does for its
simulator: the control plane sends an account's credential nowhere else.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import requests

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONTROL_TIMEOUT = 30  # seconds; seeding a big world through the control API takes a while


class WhiteskySimulator:
    """A simulator subprocess on a free port, and a client for its control API."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        world: Path | None = None,
        state: Path | None = None,
        token_ttl: int | None = None,
        seed: int | None = None,
    ) -> None:
        self._args = [
            sys.executable,
            "-m",
            "simulator.whitesky",
            "--host",
            host,
            "--port",
            str(port),
        ]
        if world is not None:
            self._args += ["--world", str(world)]
        if state is not None:
            self._args += ["--state", str(state)]
        if token_ttl is not None:
            self._args += ["--token-ttl", str(token_ttl)]
        if seed is not None:
            self._args += ["--seed", str(seed)]
        self._process: subprocess.Popen[str] | None = None
        # stderr goes to a file, not a pipe: a pipe nobody reads would fill and block it.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives with the object
        self._session = requests.Session()
        self.base_url = ""
        self.customer_id = ""

    # ---- process -------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> WhiteskySimulator:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._process = subprocess.Popen(
            self._args,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        # The first line names the address it listens on (the port may have been 0).
        line = self._process.stdout.readline() if self._process.stdout else ""
        if "listening on " not in line:
            self.stop()
            raise RuntimeError(f"whitesky simulator did not start: {line!r} {self.stderr()}")
        self.base_url = line.rsplit("listening on ", 1)[1].strip()
        whitesky_host_allow(self.base_url)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.customer_id = self._control("GET", "token")["customer_id"]
                return self
            except requests.ConnectionError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise RuntimeError("whitesky simulator does not answer") from None
                time.sleep(0.05)

    def stop(self) -> None:
        process, self._process = self._process, None
        self._session.close()
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def stderr(self) -> str:
        """What the simulator process wrote to stderr (tracebacks of its own bugs)."""
        self._stderr.seek(0)
        return self._stderr.read()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> WhiteskySimulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- addresses ---------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/1"

    @property
    def iam_url(self) -> str:
        return self.base_url

    # ---- control API -------------------------------------------------------------------

    def _control(self, method: str, name: str, body: Any = None) -> Any:
        response = self._session.request(
            method, f"{self.base_url}/_sim/{name}", json=body, timeout=CONTROL_TIMEOUT
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"simulator control {method} /_sim/{name}: {response.status_code} {response.text}"
            )
        return response.json()

    def token(self, subject: str | None = None) -> str:
        """A fresh valid JWT for the seeded customer; `subject` names another holder, whose
        calls the call log tells apart (`calls()["calls"][i]["subject"]`)."""
        if subject is None:
            return str(self._control("GET", "token")["jwt"])
        return str(self._control("POST", "token", {"subject": subject})["jwt"])

    def reset(self, world: dict[str, Any] | None = None) -> None:
        """A fresh world (the starting one unless given); faults, calls, clock and config too."""
        self.customer_id = self._control("POST", "reset", world)["customer_id"]

    def fault(self, **spec: Any) -> int:
        """Add a fault, e.g. ``fault(operation="listCustomerVGPUS", status=503, skip=1)``."""
        return int(self._control("POST", "faults", spec)["id"])

    def clear_faults(self) -> None:
        self._control("DELETE", "faults")

    def faults(self) -> list[dict[str, Any]]:
        return list(self._control("GET", "faults")["faults"])

    def advance(self, seconds: float) -> float:
        """Move the simulated clock forward; answers the new simulated now."""
        return float(self._control("POST", "clock", {"advance": seconds})["now"])

    def configure(
        self,
        *,
        token_ttl: int | None = None,
        switches: dict[str, bool] | None = None,
        **more_switches: bool,
    ) -> dict[str, Any]:
        """Set the token lifetime and flip switches (by dict or as keywords)."""
        body: dict[str, Any] = {"switches": {**(switches or {}), **more_switches}}
        if token_ttl is not None:
            body["token_ttl"] = token_ttl
        return dict(self._control("POST", "config", body))

    def state(self) -> dict[str, Any]:
        return dict(self._control("GET", "state"))

    def calls(self) -> dict[str, Any]:
        """``{"calls": [...], "reads": n, "writes": n}`` for /api/1 since the last reset."""
        return dict(self._control("GET", "calls"))

    def clear_calls(self) -> None:
        self._control("DELETE", "calls")

    def seed(self, cloudspace_id: str, **counts: Any) -> dict[str, Any]:
        """Bulk-create VMs and reservations: ``seed("cs-demo-nl", vms=10, vgpus=40)``, or
        running VMs with their vGPUs attached:
        ``seed("cs-demo-nl", vm_names=[...], vm_gpus=1, running=True)``."""
        return dict(self._control("POST", "seed", {"cloudspace_id": cloudspace_id, **counts}))


def whitesky_host_allow(origin: str) -> None:
    """Let the control plane of this process, and of the processes it starts from now on,
    send an account's credential to `origin` (an http://host:port)."""
    listed = [e for e in os.environ.get("WHITESKY_ALLOWED_HOSTS", "").split(",") if e.strip()]
    if origin not in listed:
        os.environ["WHITESKY_ALLOWED_HOSTS"] = ",".join([*listed, origin])
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        from django.conf import settings

        if origin not in settings.WHITESKY_ALLOWED_HOSTS:
            settings.WHITESKY_ALLOWED_HOSTS = [*settings.WHITESKY_ALLOWED_HOSTS, origin]


@pytest.fixture(scope="session")
def whitesky_sim_process() -> Iterator[WhiteskySimulator]:
    """The session's simulator process; tests use ``whitesky_sim``, which resets it."""
    simulator = WhiteskySimulator().start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture
def whitesky_sim(whitesky_sim_process: WhiteskySimulator) -> WhiteskySimulator:
    """The whitesky simulator, reset to the demo world, with no faults and an empty call log."""
    whitesky_sim_process.reset()
    return whitesky_sim_process
