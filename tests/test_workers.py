"""Two xdist workers of one run (bin/test runs the suite on every core) share nothing a
test changes: the broker's keys and the counters carry the worker's name, the test
database its suffix (pytest-django)."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings
from django.db import connection

from tests.checkout import ROOT

PREFIXES = (
    "from django.conf import settings; "
    "print(settings.CELERY_BROKER_TRANSPORT_OPTIONS['global_keyprefix'], "
    "settings.METRICS_KEY_PREFIX)"
)


def prefixes_of(worker: str | None) -> list[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "CAPVCO_TEST_RUN": "r1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    if worker:
        env["PYTEST_XDIST_WORKER"] = worker
    done = subprocess.run(
        [sys.executable, "-c", PREFIXES], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_each_worker_has_broker_keys_and_counters_of_its_own() -> None:
    assert prefixes_of("gw0") == ["capvco-test-r1-gw0:"] * 2
    assert prefixes_of("gw1") == ["capvco-test-r1-gw1:"] * 2
    assert prefixes_of(None) == ["capvco-test-r1:"] * 2  # not under xdist


def test_this_worker_uses_its_own_test_database_and_keys(db: None) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    if worker:
        assert connection.settings_dict["NAME"].endswith(f"_{worker}")
        assert prefix.endswith(f"-{worker}:")
    else:
        assert prefix == f"capvco-test-{os.environ['CAPVCO_TEST_RUN']}:"
