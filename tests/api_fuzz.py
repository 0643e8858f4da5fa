"""Our API against its own OpenAPI schema, with schemathesis: the world it runs in, and the
long run as a command.

    python -m tests.api_fuzz [--examples 300] [--seed 1] [--as viewer] [-- schemathesis options]

starts the API on a throwaway test database (the settings of the test suite, DEBUG off;
DATABASE_URL says which: PostgreSQL, or SQLite as the embedded default has it),
fills it with one of every object, logs a superuser in (`--as viewer`: a viewer of the
world's account), and runs `schemathesis run` with every
check and phase (stateful included) against it. The test suite runs a bounded, derandomized
share of the same (tests/test_api_contract.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

# A session of a superuser: the cookie, and a CSRF token that matches its cookie.
CSRF_TOKEN = "apicontractcsrftoken0123456789ab"


def served_schema() -> dict[str, Any]:
    """The API's OpenAPI schema, from the generator behind /api/v1/schema/."""
    from drf_spectacular.generators import SchemaGenerator

    return dict(SchemaGenerator().get_schema(request=None, public=True))


# Rules no OpenAPI schema can state. A request that breaks one is refused (400) though it
# is valid by the schema; for these requests alone that refusal is not counted as a
# failure (every other check still counts).


def _past_expiry(body: dict[str, Any]) -> bool:
    """A token asked to expire before now: no JSON Schema keyword compares a date-time
    with the clock."""
    expires = body.get("expires_at")
    if not isinstance(expires, str):
        return False
    try:
        when = datetime.fromisoformat(expires.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return when.tzinfo is not None and when <= datetime.now(UTC)


def _not_a_kubeconfig(body: dict[str, Any]) -> bool:
    """A kubeconfig that does not read as one (YAML of clusters, users and a context): a
    document's structure inside a string is beyond a pattern."""
    from capvco_web.integrations.kube import KubeconfigInvalid, kubeconfig_load

    kubeconfig = body.get("kubeconfig")
    if not isinstance(kubeconfig, str) or not kubeconfig.strip():
        return False
    try:
        kubeconfig_load(kubeconfig)
    except KubeconfigInvalid:
        return True
    return False


def _gpus_asked(body: dict[str, Any]) -> bool:
    """GPUs asked for: whether a card of the location has the type and holds the count
    in all is the mirrored cards' to say (MachinePool.clean), not the schema's."""
    gpu = body.get("gpu")
    return isinstance(gpu, dict) and isinstance(gpu.get("count"), int) and gpu["count"] > 0


UNSTATABLE = {
    "POST /api/v1/pools/": _gpus_asked,
    "PUT /api/v1/pools/{id}/": _gpus_asked,
    "PATCH /api/v1/pools/{id}/": _gpus_asked,
    "POST /api/v1/tokens/": _past_expiry,
    "POST /api/v1/clusters/": _not_a_kubeconfig,
    "PUT /api/v1/clusters/{id}/kubeconfig/": _not_a_kubeconfig,
    "PUT /api/v1/accounts/{id}/capi-kubeconfig/": _not_a_kubeconfig,
}


def _made_up_cursor(case: Any, response: Any) -> bool:
    """A cursor list's `cursor` refused, alone: a cursor is the opaque value of a `next` or
    `previous` link, and whether a string is one we made is beyond a pattern."""
    if "cursor" not in (case.query or {}):
        return False
    try:
        fields = response.json().get("fields")
    except ValueError:
        return False
    return isinstance(fields, dict) and set(fields) == {"cursor"}


# The bounds of a period asked for, which refer to each other, to the step and to the
# clock: a start that is no step's start, an end not after the start, a range too long or
# past the hours kept, a window named beside a start or an end, or by the month where it
# is not whole months (billing.selectors.cost_history, and the cost by label's window,
# read alike; the leak summary's since and until).
PERIOD_BOUNDS = {
    "GET /api/v1/costs/": {"window", "start", "end", "step"},
    "GET /api/v1/clusters/{id}/cost-by-label/": {"window", "start", "end", "step"},
    "GET /api/v1/leaks/summary/": {"since", "until"},
}


def _period_out_of_bounds(case: Any, response: Any) -> bool:
    """A period's bounds refused, alone: whether they fit together is beyond a schema."""
    bounds = PERIOD_BOUNDS.get(case.operation.label)
    if bounds is None:
        return False
    try:
        fields = response.json().get("fields")
    except ValueError:
        return False
    return isinstance(fields, dict) and bool(fields) and set(fields) <= bounds


def _body_schema_refuses(case: Any) -> bool:
    """Whether the body sent is one the operation's schema itself refuses. schemathesis
    may still call it valid: its error feedback reads our errors' `fields` as a property
    of the body and sends one (which every body refuses: additionalProperties false)."""
    bodies = list(case.operation.body)
    sent = case.body
    return bool(bodies) and isinstance(sent, dict) and not any(b.is_valid(sent) for b in bodies)


def keeps_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """schemathesis' `filter_failure` hook: all but a refusal of a request that breaks
    one of the rules above, gives a cursor we did not make or a period out of bounds, or
    that the schema refuses itself."""
    from schemathesis.openapi.checks import RejectedPositiveData

    if not isinstance(failure, RejectedPositiveData):
        return True
    rule = UNSTATABLE.get(case.operation.label)
    unstatable = rule is not None and isinstance(case.body, dict) and rule(case.body)
    return not (
        unstatable
        or _made_up_cursor(case, response)
        or _period_out_of_bounds(case, response)
        or _body_schema_refuses(case)
    )


# The superuser the run acts as (it owns the world's API token), and a viewer of the
# world's account, the least a member may do.
CONTRACT_USER = "contract"
CONTRACT_VIEWER = "contract-viewer"


def seed_world() -> dict[str, int]:
    """One of every object the API serves, wired together, and the superuser the run acts
    as; the id of each object, by the first segment of its path."""

    from billing.models import IdleSpell, Leak
    from capvco_web.tokens import api_token_create
    from cloud.models import Cloudspace, Image
    from dashboard.models import SavedView
    from tests.factories import (
        AuditEventFactory,
        ExternalNetworkFactory,
        GpuProfileFactory,
        KubeNodeFactory,
        KubePodFactory,
        LeakedNicFactory,
        MachineFactory,
        MembershipFactory,
        PodNicFactory,
        UserFactory,
        VgpuReservationFactory,
        VirtualMachineFactory,
        role_group,
    )

    superuser = UserFactory(username=CONTRACT_USER, is_staff=True, is_superuser=True)
    for role in ("viewer", "operator", "admin"):
        role_group(role)  # the roles a membership names (a flushed database has none)
    attached = VgpuReservationFactory()
    machine = attached.machine
    pool = machine.pool
    VgpuReservationFactory(orphaned=True, location=attached.location)
    MachineFactory(pool=pool)
    card = GpuProfileFactory(location=attached.location)
    member = MembershipFactory(account=pool.cluster.account, role="operator")
    viewer = UserFactory(username=CONTRACT_VIEWER)
    MembershipFactory(user=viewer, account=pool.cluster.account, role="viewer")
    node = KubeNodeFactory(cluster=pool.cluster, machine=machine)
    pod = KubePodFactory(cluster=pool.cluster, node_name=node.name)
    token, _ = api_token_create(user=superuser, name="contract", actor=superuser)
    cloudspace = Cloudspace.objects.create(
        location=attached.location, cloudspace_id="cs-1", name="prod", status="DEPLOYED"
    )
    image = Image.objects.create(
        location=attached.location, image_id=1, name="ubuntu-24.04", status="CREATED"
    )
    nic = PodNicFactory(cluster=pool.cluster, location=attached.location)
    leaked = LeakedNicFactory(cluster=pool.cluster, location=attached.location)
    network = ExternalNetworkFactory(location=attached.location)
    orphan_vm = VirtualMachineFactory(
        location=attached.location, name="capvco-gone-m-0", orphan_reason="no such machine"
    )
    leak = Leak.objects.create(
        account=pool.cluster.account, location=attached.location, kind=Leak.Kind.VM,
        external_id=str(orphan_vm.vm_id), name=orphan_vm.name, currency="EUR",
        monthly_price=Decimal("21.90"), billed_since=datetime(2026, 12, 1, tzinfo=UTC),
        leaked_since=datetime(2026, 12, 1, tzinfo=UTC),
    )  # fmt: skip
    idle = IdleSpell.objects.create(
        account=pool.cluster.account, location=attached.location, cluster_id=pool.cluster_id,
        cluster_name=pool.cluster.name, pool_id=pool.pk, machine_id=machine.pk,
        node_name=node.name, currency="EUR", idle_gpus=1, hourly=Decimal(1),
        since=datetime(2026, 12, 1, tzinfo=UTC),
    )  # fmt: skip
    return {
        "accounts": pool.cluster.account_id,
        "memberships": member.pk,
        "locations": attached.location_id,
        "cloudspaces": cloudspace.pk,
        "images": image.pk,
        "vms": orphan_vm.pk,
        "clusters": pool.cluster_id,
        "sites": pool.site_id,
        "pools": pool.pk,
        "machines": machine.pk,
        "nodes": node.pk,
        "pods": pod.pk,
        "gpu-profiles": card.pk,
        "reservations": attached.pk,
        "tokens": token.pk,
        "sriov/clusters": pool.cluster_id,
        "sriov/nics": nic.pk,
        "sriov/leaked-nics": leaked.pk,
        "sriov/external-networks": network.pk,
        "leaks": leak.pk,
        "idle-gpus": idle.pk,
        "audit": AuditEventFactory(account=pool.cluster.account).pk,
        "saved-views": SavedView.objects.create(
            user=superuser, list_name="vms", name="orphans", query="orphaned=true"
        ).pk,
    }


def superuser_headers(username: str = CONTRACT_USER) -> dict[str, str]:
    """Headers that authenticate as the run's superuser (or another user of the world)
    through a session, as a browser would (a session may make API tokens; a token may
    not)."""
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(username=username))
    session = client.cookies["sessionid"].value
    return {"Cookie": f"sessionid={session}; csrftoken={CSRF_TOKEN}", "X-CSRFToken": CSRF_TOKEN}


def pin_path(case: Any, world: dict[str, int]) -> None:
    """Aim most cases at an object that exists (the interesting answers); leave the others
    with the id drawn, which mostly names none (404). Ids that are not numbers (negative
    cases) stay as drawn. The world's key is the path between /api/v1/ and the id."""
    drawn = (case.path_parameters or {}).get("id")
    if isinstance(drawn, int) and not isinstance(drawn, bool) and drawn % 4:
        collection = case.path.split("/{id}")[0].removeprefix("/api/v1/")
        case.path_parameters["id"] = world[collection]


def _run(examples: int, seed: int, username: str, extra: list[str]) -> int:
    import django
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.test.testcases import LiveServerThread
    from django.test.utils import setup_databases, teardown_databases

    django.setup()
    from django.db import connections

    # Refusals are what most cases are about; a server error still shows, with its traceback.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    databases = setup_databases(verbosity=1, interactive=False, keepdb=False)
    # SQLite's test database is in this process's memory: the server's thread shares this
    # thread's connection to it (as Django's LiveServerTestCase does).
    shared = {c.alias: c for c in connections.all() if c.vendor == "sqlite" and c.is_in_memory_db()}
    for connection in shared.values():
        connection.inc_thread_sharing()
    server = LiveServerThread("127.0.0.1", StaticFilesHandler, shared or None, port=0)
    try:
        seed_world()
        # The session authenticates; the empty Authorization header makes it ours for
        # schemathesis (see tests/test_api_contract.py).
        headers = {**superuser_headers(username), "Authorization": ""}
        server.daemon = True
        server.start()
        server.is_ready.wait()
        if server.error:
            raise server.error
        base = f"http://127.0.0.1:{server.port}"
        document = Path(tempfile.mkdtemp()) / "schema.json"
        document.write_text(json.dumps(served_schema()))
        command = [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            str(document),
            f"--url={base}",
            "--checks=all",
            f"--max-examples={examples}",
            f"--seed={seed}",
            "--continue-on-failure",
            "--suppress-health-check=all",
            "--workers=1",
            *[f"--header={name}: {value}" for name, value in headers.items()],
            *extra,
        ]
        hooks = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.api_fuzz_hooks"}
        return subprocess.run(command, check=False, env=hooks).returncode
    finally:
        server.terminate()
        for connection in shared.values():
            connection.dec_thread_sharing()
        teardown_databases(databases, verbosity=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="per operation and phase")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--as",
        dest="role",
        choices=["superuser", "viewer"],
        default="superuser",
        help="act as the superuser, or as a viewer of the world's account",
    )
    parser.add_argument("extra", nargs="*", help="more `schemathesis run` options, after --")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    # One caller sends thousands of requests a minute: the throttles would answer most
    # of them 429 and hide what the API does with them.
    for rate in ("API_RATE_USER", "API_RATE_ANON", "API_RATE_FAILED_AUTH"):
        os.environ.setdefault(rate, "1000000/minute")
    username = CONTRACT_USER if args.role == "superuser" else CONTRACT_VIEWER
    return _run(args.examples, args.seed, username, args.extra)


if __name__ == "__main__":
    sys.exit(main())
