"""Our API against its own OpenAPI schema, with schemathesis: the world it runs in, and the
long run as a command.

    python -m tests.api_fuzz [--examples 300] [--seed 1] [-- more schemathesis options]

starts the API on a throwaway test database (the settings of the test suite), fills it
with one of every object, logs a superuser in, and runs `schemathesis run` with every
check and phase (stateful included) against it. The test suite runs a bounded, derandomized
share of the same (tests/test_api_contract.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# A session of a superuser: the cookie, and a CSRF token that matches its cookie.
CSRF_TOKEN = "apicontractcsrftoken0123456789ab"


def served_schema() -> dict[str, Any]:
    """The API's OpenAPI schema, from the generator behind /api/v1/schema/."""
    from drf_spectacular.generators import SchemaGenerator

    return dict(SchemaGenerator().get_schema(request=None, public=True))


def seed_world() -> dict[str, int]:
    """One of every object the API serves, wired together; the id of each, by the first
    segment of its path."""
    from tests.factories import GpuProfileFactory, MachineFactory, VgpuReservationFactory

    attached = VgpuReservationFactory()
    machine = attached.machine
    pool = machine.pool
    VgpuReservationFactory(orphaned=True, location=attached.location)
    MachineFactory(pool=pool)
    card = GpuProfileFactory(location=attached.location)
    return {
        "accounts": pool.cluster.account_id,
        "locations": attached.location_id,
        "clusters": pool.cluster_id,
        "sites": pool.site_id,
        "pools": pool.pk,
        "machines": machine.pk,
        "gpu-profiles": card.pk,
        "reservations": attached.pk,
    }


def superuser_headers() -> dict[str, str]:
    """Headers that authenticate as a new superuser through a session, as a browser would."""
    from django.test import Client

    from tests.factories import UserFactory

    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    session = client.cookies["sessionid"].value
    return {"Cookie": f"sessionid={session}; csrftoken={CSRF_TOKEN}", "X-CSRFToken": CSRF_TOKEN}


def pin_path(case: Any, world: dict[str, int]) -> None:
    """Aim most cases at an object that exists (the interesting answers); leave the others
    with the id drawn, which mostly names none (404). Ids that are not numbers (negative
    cases) stay as drawn."""
    drawn = (case.path_parameters or {}).get("id")
    if isinstance(drawn, int) and not isinstance(drawn, bool) and drawn % 4:
        case.path_parameters["id"] = world[case.path.split("/")[3]]


def _run(examples: int, seed: int, extra: list[str]) -> int:
    import django
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.test.testcases import LiveServerThread
    from django.test.utils import setup_databases, teardown_databases

    django.setup()
    # Refusals are what most cases are about; a server error still shows, with its traceback.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    databases = setup_databases(verbosity=1, interactive=False, keepdb=False)
    server = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
    try:
        seed_world()
        headers = superuser_headers()
        server.daemon = True
        server.start()
        server.is_ready.wait()
        if server.error:
            raise server.error
        base = f"http://127.0.0.1:{server.port}"
        command = [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{base}/api/v1/schema/?format=json",
            "--checks=all",
            f"--max-examples={examples}",
            f"--seed={seed}",
            "--continue-on-failure",
            "--suppress-health-check=all",
            "--workers=1",
            *[f"--header={name}: {value}" for name, value in headers.items()],
            *extra,
        ]
        return subprocess.run(command, check=False).returncode
    finally:
        server.terminate()
        teardown_databases(databases, verbosity=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="per operation and phase")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("extra", nargs="*", help="more `schemathesis run` options, after --")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    return _run(args.examples, args.seed, args.extra)


if __name__ == "__main__":
    sys.exit(main())
