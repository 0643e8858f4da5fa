"""Pools selected on a cluster's page, set to one size with one reason: each scaled by the
pool scale service and audited on its own; one the service refuses (autoscaled) is named
with why, and the others still go. A viewer is refused, as the single scale refuses them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from clusters import services
from clusters.models import MachinePool
from tests.dashboard.conftest import World
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def _pools(world: World) -> tuple[MachinePool, MachinePool]:
    return world.pool, MachinePool.objects.get(site=world.pool.site, name="cpu")


def _url(world: World, *pools: MachinePool) -> str:
    return f"/clusters/{world.cluster.pk}/pools/scale/?" + "&".join(
        f"pool={pool.pk}" for pool in pools
    )


def test_the_cluster_page_offers_each_pool_for_the_selection(
    admin_client: Client, world: World
) -> None:
    html = admin_client.get(f"/clusters/{world.cluster.pk}/").content.decode()
    for pool in _pools(world):
        assert f'name="pool" value="{pool.pk}" form="pools-selected"' in html
    assert f'action="/clusters/{world.cluster.pk}/pools/scale/"' in html


def test_the_selected_pools_are_scaled_with_one_reason_each_audited(
    admin_client: Client, world: World
) -> None:
    gpu, cpu = _pools(world)
    confirm = admin_client.get(_url(world, gpu, cpu)).content.decode()
    assert "2 pools of prod (replicas now): cpu (1), gpu (2)" in confirm

    response = admin_client.post(
        _url(world, gpu, cpu), {"replicas": 3, "reason": "training week"}, follow=True
    )
    assert response.status_code == 200
    assert "Scaled 2 pools to 3 replicas: cpu, gpu." in response.content.decode()
    assert [MachinePool.objects.get(pk=p.pk).replicas for p in (gpu, cpu)] == [3, 3]
    events = AuditEvent.objects.filter(action="pool.scale").order_by("object_repr")
    assert [(e.object_id, e.before, e.after, e.reason) for e in events] == [
        (str(cpu.pk), {"replicas": 1}, {"replicas": 3}, "training week"),
        (str(gpu.pk), {"replicas": 2}, {"replicas": 3}, "training week"),
    ]


def test_an_autoscaled_pool_is_refused_by_name_and_the_others_still_scale(
    admin_client: Client, world: World
) -> None:
    gpu, cpu = _pools(world)
    MachinePool.objects.filter(pk=gpu.pk).update(
        autoscale_enabled=True, autoscale_min=0, autoscale_max=4
    )
    response = admin_client.post(
        _url(world, gpu, cpu), {"replicas": 3, "reason": "quiet week"}, follow=True
    )
    html = response.content.decode()
    assert "Scaled 1 pools to 3 replicas: cpu." in html
    assert "Refused 1: gpu: Pool gpu autoscales between 0 and 4 machines" in html
    assert [MachinePool.objects.get(pk=p.pk).replicas for p in (gpu, cpu)] == [2, 3]
    assert list(AuditEvent.objects.values_list("object_id", flat=True)) == [str(cpu.pk)]


def test_a_size_past_the_limit_or_no_reason_scales_nothing(
    admin_client: Client, world: World
) -> None:
    gpu, cpu = _pools(world)
    for asked in ({"replicas": 101, "reason": "a lot"}, {"replicas": 1, "reason": " "}):
        response = admin_client.post(_url(world, gpu, cpu), asked)
        assert response.status_code == 400
    with pytest.raises(ValidationError):
        services.pools_scale(
            pools=[gpu, cpu], replicas=-1, actor=SystemActor.RECONCILER, reason="x"
        )
    assert [MachinePool.objects.get(pk=p.pk).replicas for p in (gpu, cpu)] == [2, 1]
    assert not AuditEvent.objects.exists()


def test_nothing_selected_or_a_pool_that_is_no_id_is_a_clear_error(
    admin_client: Client, world: World
) -> None:
    response = admin_client.post(_url(world), {"replicas": 1, "reason": "x"})
    assert response.status_code == 400
    assert "Select the pools to scale." in response.content.decode()
    bad = admin_client.get(f"/clusters/{world.cluster.pk}/pools/scale/?pool=gpu")
    assert bad.status_code == 400
    assert bad.content.decode() == "pool takes ids: whole numbers"


def test_a_viewer_may_not_scale_the_selected_pools(
    member: Callable[[str], Client], world: World
) -> None:
    viewer = member("viewer")
    gpu, cpu = _pools(world)
    html = viewer.get(f"/clusters/{world.cluster.pk}/").content.decode()
    assert 'form="pools-selected"' not in html
    response = viewer.post(_url(world, gpu, cpu), {"replicas": 5, "reason": "mine now"})
    assert response.status_code == 403
    assert [MachinePool.objects.get(pk=p.pk).replicas for p in (gpu, cpu)] == [2, 1]


def test_an_operator_of_another_account_is_refused_per_pool_by_the_service(
    world: World,
) -> None:
    stranger = MembershipFactory(role="operator").user
    outcome = services.pools_scale(
        pools=list(_pools(world)), replicas=4, actor=stranger, reason="not mine"
    )
    assert outcome.scaled == []
    assert [line.split(":")[0] for line in outcome.refused] == ["gpu", "cpu"]
    assert "may not do this" in outcome.refused[0]
    assert not AuditEvent.objects.exists()
