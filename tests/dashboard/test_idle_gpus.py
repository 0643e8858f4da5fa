"""The idle GPU page: each GPU node whose attached vGPUs no pod asks for, with since when,
its pool and what the idle GPUs cost so far (`IdleSpell.cost`, as the API and the notice
say), filtered as the API filters them, and only the user's own accounts'."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing.models import IdleSpell
from tests.dashboard.conftest import World
from tests.factories import ClusterFactory, LocationFactory, MachineFactory, MachinePoolFactory

pytestmark = pytest.mark.django_db


def _spell(world: World, node: str, *, hours: int, ended: bool = False) -> IdleSpell:
    machine = world.machines[0] if node.endswith("0") else world.machines[1]
    now = timezone.now()
    return IdleSpell.objects.create(
        account=world.cluster.account, location=world.fresh, cluster_id=world.cluster.pk,
        cluster_name=world.cluster.name, pool_id=world.pool.pk, machine_id=machine.pk,
        node_name=node, currency="EUR", idle_gpus=2, hourly=Decimal("1.50"),
        since=now - timedelta(hours=hours), ended_at=now - timedelta(hours=1) if ended else None,
    )  # fmt: skip


def test_each_idle_node_shows_since_when_its_pool_and_cost_so_far(
    world: World, member: Callable[[str], Client]
) -> None:
    idle = _spell(world, "prod-a100-0", hours=3)
    ended = _spell(world, "prod-a100-1", hours=5, ended=True)
    pool = MachinePoolFactory(cluster=ClusterFactory(name="theirs"))
    theirs = IdleSpell.objects.create(
        account=pool.cluster.account, location=LocationFactory(), cluster_id=pool.cluster.pk,
        cluster_name="theirs", pool_id=pool.pk, machine_id=MachineFactory(pool=pool).pk,
        node_name="their-node", currency="EUR", idle_gpus=1, hourly=1, since=timezone.now(),
    )  # fmt: skip
    client = member("viewer")

    home = client.get("/").content.decode()
    response = client.get("/idle-gpus/")
    page = response.content.decode()

    assert 'href="/idle-gpus/"' in home  # in the navigation
    assert response.status_code == 200
    assert [row.spell.pk for row in response.context["rows"]] == [idle.pk, ended.pk]
    assert theirs.node_name not in page
    row = page.split(f'id="idle-{idle.pk}"')[1].split("</tr>")[0]
    assert "prod-a100-0" in row and world.pool.name in row and world.cluster.name in row
    assert "4.50 EUR" in row  # 3 hours at 1.50 an hour, as IdleSpell.cost says
    assert idle.since.strftime("%Y-%m-%d %H:%M") in row
    ended_row = page.split(f'id="idle-{ended.pk}"')[1].split("</tr>")[0]
    assert "6.00 EUR" in ended_row  # 4 hours, to its end

    still = client.get("/idle-gpus/", {"open": "true", "pool_id": world.pool.pk})
    assert [row.spell.pk for row in still.context["rows"]] == [idle.pk]
    refused = client.get("/idle-gpus/", {"open": "maybe"})
    assert refused.status_code == 400 and "open:" in refused.content.decode()
