"""The SQL queries of every page and fragment do not grow with the rows: at most 20, with
10 and with 10,000 reservations (and as many audit events)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from capvco_web.models import AuditEvent
from gpus.models import VgpuReservation
from tests.dashboard.conftest import World

pytestmark = pytest.mark.django_db
State = VgpuReservation.State
MOST = 20


def populate(world: World, n: int, start: int = 0) -> None:
    """`n` more reservations, most of them released history, some orphans, some not ours,
    some held by the machines; and `n` audit events."""
    now = timezone.now()
    rows = []
    for i in range(start, start + n):
        kind = i % 20
        machine = world.machines[i % 2] if kind == 0 else None
        rows.append(
            VgpuReservation(
                location=world.fresh,
                name=(
                    f"other-{i}"
                    if kind == 1
                    else machine.vgpu_name(i)
                    if machine
                    else f"capvco-prod-old-{i}-gpu-0"
                ),
                vgpu_id=f"bulk-{i}",
                gpu_id="card-a100",
                state=State.ATTACHED if machine else State.RESERVED if kind < 4 else State.RELEASED,
                machine=machine,
                vm_id=machine.vm_id if machine else None,
                owner_cluster="prod" if machine or kind > 1 else "",
                owner_machine=machine.name if machine else f"old-{i}",
                owner_index=i if machine else 0,
                orphaned_since=now if 1 <= kind < 4 else None,
                released_at=now if kind >= 4 else None,
            )
        )
    VgpuReservation.objects.bulk_create(rows, batch_size=2000)
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                account=world.fresh.account,
                actor_name="ops",
                action="vgpu.release_requested",
                object_type="gpus.VgpuReservation",
                object_id=str(i),
                object_repr=f"capvco-prod-old-{i}-gpu-0",
            )
            for i in range(start, start + n)
        ],
        batch_size=2000,
    )


def requests(world: World) -> dict[str, tuple[str, dict[str, str]]]:
    cluster = f"/clusters/{world.cluster.pk}/"
    htmx = {"HTTP_HX_REQUEST": "true"}

    def fragment(target: str) -> dict[str, str]:
        return {**htmx, "HTTP_HX_TARGET": target}

    return {
        "overview": ("/", {}),
        "overview fragment": ("/", fragment("overview")),
        "system status fragment": ("/", fragment("system-status")),
        "reservations": ("/reservations/", {}),
        "reservations fragment": ("/reservations/", fragment("reservation-table")),
        "reservations filtered": ("/reservations/?orphaned=true&not_ours=false", {}),
        "reservations by type": ("/reservations/?type=NVIDIA+A100&state=attached", {}),
        "reservations searched": ("/reservations/?q=old-1", {}),
        "reservations last page": ("/reservations/?sort=name&last=1", {}),
        "reservations CSV": ("/reservations/csv/?orphaned=true", {}),
        "release confirmation": (f"/reservations/{world.orphan.pk}/release/", htmx),
        "clusters": ("/clusters/", {}),
        "clusters fragment": ("/clusters/", fragment("cluster-table")),
        "cluster": (cluster, {}),
        "cluster fragment": (cluster, fragment("cluster-body")),
        "new cluster": (f"/clusters/new/?account={world.fresh.account_id}", {}),
        "audit log": ("/audit/", {}),
        "audit log fragment": ("/audit/?action=vgpu.", fragment("audit-table")),
    }


def count_queries(client: Client, path: str, headers: dict[str, str]) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path, **headers)  # type: ignore[arg-type]
        assert response.status_code == 200, (path, response.content[:500])
        if response.streaming:
            b"".join(response.streaming_content)  # type: ignore[attr-defined]
    return len(queries)


@pytest.fixture(params=["superuser", "admin of the account"])
def counted(
    request: pytest.FixtureRequest,
    admin_client: Client,
    member: Callable[[str], Client],
    world: World,
) -> Callable[[], dict[str, int]]:
    """Counts for a superuser, and for a member, whose rows are chosen by role."""
    client = admin_client if request.param == "superuser" else member("admin")

    def count() -> dict[str, int]:
        return {
            name: count_queries(client, path, headers)
            for name, (path, headers) in requests(world).items()
        }

    return count


def test_queries_per_page_stay_the_same_from_10_to_10000_reservations(
    world: World, counted: Callable[[], dict[str, int]]
) -> None:
    populate(world, 10)
    small = counted()
    populate(world, 10_000 - 10, start=10)
    large = counted()
    assert max(small.values()) <= MOST, small
    assert max(large.values()) <= MOST, large
    # A page reads what its rows link to (their VMs, card types, owners' clusters) in one
    # query per kind, skipped when no row on it has one: up to 3 apart, never per row.
    assert {name: n for name, n in large.items() if abs(n - small[name]) > 3} == {}
