"""A short seeded fault run of our own parts (tests/chaos_ops.py): PostgreSQL restarted and
its connections cut, the broker restarted empty, beat stopped and run twice, whitesky
unreachable (refused and held), a gunicorn worker killed mid-request and a cluster's
Kubernetes API server cut off (its connections dropped, or held open and silent), one
round of each under a busy GPU lifecycle (autoscaled pools, releases of vGPUs reserved by
hand, pods' SR-IOV NICs added and deleted through the agent API); then every invariant
holds. Then the same on the embedded default, SQLite, whose disk is filled.

The run is the command itself, in a process of its own: it starts its own PostgreSQL and
Redis before Django reads its settings. The seed is random unless CHAOS_SEED is set; it is
printed first and named in a failure, so `python -m tests.chaos_ops --seed N` replays it
(longer: `--minutes`)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

from tests.chaos_ops import EMBEDDED_FAULTS, FAULTS
from tests.conftest import require
from tests.e2e.processes import ROOT
from tests.servers import PG_BIN

pytestmark = pytest.mark.e2e
STORM_MINUTES = "1"  # one round of every fault; with the start and the settling, 2.5 min
SETTLE_SECONDS = "60"


def test_our_own_parts_fail_one_after_another_and_every_invariant_holds_after() -> None:
    require((PG_BIN / "initdb").exists(), f"needs PostgreSQL 15's programs in {PG_BIN}")
    run_and_check(FAULTS)


def test_the_embedded_defaults_parts_fail_and_every_invariant_holds_after() -> None:
    """SQLite on a small disk of the run's own, filled to the last byte for seconds, in
    place of PostgreSQL's faults."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    run_and_check(EMBEDDED_FAULTS, "--embedded")


def run_and_check(kinds: tuple[str, ...], *options: str) -> None:
    seed = os.environ.get("CHAOS_SEED") or str(secrets.randbelow(10**6))
    print(f"chaos-ops seed {seed}")

    run = subprocess.run(
        [sys.executable, "-m", "tests.chaos_ops", "--seed", seed,
         "--minutes", STORM_MINUTES, "--settle", SETTLE_SECONDS, *options],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip

    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-20000:]
    table = said.split("fault   ", 1)[1]
    # Every kind of fault came, once at least (the table's count column).
    rows = table.splitlines()[1 : 1 + len(kinds)]
    assert [line.split()[0] for line in rows] == list(kinds), table
    assert min(int(line.split()[1]) for line in rows) >= 1, table
