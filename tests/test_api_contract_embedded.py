"""The API on the embedded default, SQLite (what `make run` uses without DATABASE_URL),
while the suite runs on PostgreSQL: a part of the suite and a bounded fuzz of every
operation (tests/api_fuzz.py), each in a process of its own on a SQLite database.

SQLite is not PostgreSQL with fewer features: it refuses an integer past 64 bits as a
parameter (OverflowError, a 500), where PostgreSQL compares it as a numeric.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parent.parent
# Cases per operation: the fuzz finds what the schema lets through, bounded in time here;
# `DATABASE_URL=sqlite:////tmp/fuzz.sqlite3 python -m tests.api_fuzz` runs the long one.
EXAMPLES = os.environ.get("CAPVCO_API_CONTRACT_EMBEDDED_EXAMPLES", "3")


def _on_sqlite(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3"}
    return subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_ids_past_64_bits_match_nothing_on_the_embedded_default(tmp_path: Path) -> None:
    ran = _on_sqlite(
        tmp_path, "-m", "pytest", "-n", "0", "-q", "tests/test_api_filters.py", "-k", "past_64"
    )

    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and "deselected" in ran.stdout


def test_the_node_agents_add_and_del_answer_on_the_embedded_default(tmp_path: Path) -> None:
    # A queued ADD answers its place and wait from the VM's recent attaches: a query SQLite
    # cannot run as PostgreSQL does (no LIMIT inside a UNION's parts).
    ran = _on_sqlite(
        tmp_path, "-m", "pytest", "-n", "0", "-q", "tests/sriov/test_agent_api.py",
        "-k", "answers_what_the_plugin_configures or del_detaches",
    )  # fmt: skip

    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    assert "2 passed" in ran.stdout


def test_the_api_keeps_its_contract_on_the_embedded_default(tmp_path: Path) -> None:
    ran = _on_sqlite(
        tmp_path, "-m", "tests.api_fuzz", f"--examples={EXAMPLES}", "--", "--phases=fuzzing"
    )

    assert ran.returncode == 0, ran.stdout[-8000:] + ran.stderr[-2000:]
    assert "Fuzzing" in ran.stdout and " passed" in ran.stdout
