"""The services check the role themselves, whoever calls them (API, admin, a command): a
person whose role does not allow the change is refused and nothing is written; a system
component, named by a string, acts on every account."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud import services as cloud_services
from cloud.models import Membership
from clusters import services
from clusters.models import Cluster, ClusterSite, MachinePool
from clusters.releases import reservation_release_request
from tests.access.conftest import Tenant, World, caller_make
from tests.factories import UserFactory

REASON = "as asked"

# (the service call on a tenant's object by an actor, the role it needs)
CALLS: dict[str, tuple[Callable[[Tenant, Any], object], str]] = {
    "cluster_create": (
        lambda t, a: services.cluster_create(
            cluster=Cluster(name="fresh", account=t.account), actor=a
        ),
        "admin",
    ),
    "site_create": (
        lambda t, a: services.site_create(
            site=ClusterSite(
                cluster=t.cluster, location=t.spare_location, cloudspace_id="cs-x", image_id=1
            ),
            actor=a,
        ),
        "admin",
    ),
    "pool_create": (
        lambda t, a: services.pool_create(
            pool=MachinePool(cluster=t.cluster, site=t.site, name="new", replicas=0), actor=a
        ),
        "admin",
    ),
    "cluster_setup": (
        lambda t, a: services.cluster_setup(
            name="fresh",
            account=t.account,
            sites=[services.SiteSpec(t.spare_location, "cs-x", 1)],
            pools=[services.PoolSpec(name="gpu", location=t.spare_location, replicas=0)],
            actor=a,
        ),
        "admin",
    ),
    "pool_update": (
        lambda t, a: services.pool_update(pool=_set(t.pool, vcpus=16), actor=a),
        "admin",
    ),
    "pool_scale": (
        lambda t, a: services.pool_scale(pool=t.pool, replicas=5, actor=a, reason=REASON),
        "operator",
    ),
    "pool_delete": (
        lambda t, a: services.pool_delete(pool=t.empty_pool, actor=a),
        "admin",
    ),
    "site_delete": (
        lambda t, a: services.site_delete(site=t.empty_site, actor=a),
        "admin",
    ),
    "machine_delete": (
        lambda t, a: services.machine_delete(machine=t.machine, actor=a, reason=REASON),
        "operator",
    ),
    "machine_force_delete": (
        lambda t, a: services.machine_force_delete(
            machine=t.machine, actor=a, reason=REASON, confirm=t.machine.name
        ),
        "operator",
    ),
    "cluster_delete": (
        lambda t, a: services.cluster_delete(
            cluster=t.cluster, actor=a, reason=REASON, confirm=t.cluster.name
        ),
        "operator",
    ),
    "account_update": (
        lambda t, a: cloud_services.account_update(
            account=t.account, changes={"customer_id": "x"}, actor=a
        ),
        "admin",
    ),
    "membership_create": (
        lambda t, a: cloud_services.membership_create(
            membership=Membership(user=UserFactory(), account=t.account, role=t.membership.role),
            actor=a,
        ),
        "admin",
    ),
    "membership_delete": (
        lambda t, a: cloud_services.membership_delete(membership=t.membership, actor=a),
        "admin",
    ),
    "reservation_release_request": (
        lambda t, a: reservation_release_request(reservation=t.reservation, actor=a, reason=REASON),
        "operator",
    ),
}
BELOW = {"operator": "viewer", "admin": "operator"}


def _set(obj: Any, **fields: Any) -> Any:
    for name, value in fields.items():
        setattr(obj, name, value)
    return obj


@pytest.mark.parametrize("name", list(CALLS))
def test_a_role_below_the_one_needed_is_refused_by_the_service(world: World, name: str) -> None:
    call, needed = CALLS[name]
    actor = caller_make(BELOW[needed], world)

    with pytest.raises(PermissionDenied):
        call(world.own, actor)

    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("name", list(CALLS))
def test_the_role_needed_may_and_the_change_is_audited(world: World, name: str) -> None:
    call, needed = CALLS[name]

    call(world.own, caller_make(needed, world))

    assert AuditEvent.objects.exists()


@pytest.mark.parametrize("name", list(CALLS))
def test_no_role_in_another_account_lets_the_service_act_there(world: World, name: str) -> None:
    call, _ = CALLS[name]
    with pytest.raises(PermissionDenied):
        call(world.other, caller_make("admin", world))
    assert not AuditEvent.objects.exists()


def test_a_system_component_acts_on_every_account(world: World) -> None:
    services.pool_scale(
        pool=world.other.pool, replicas=0, actor=SystemActor.RECONCILER, reason="idle"
    )
    assert MachinePool.objects.get(pk=world.other.pool.pk).replicas == 0
