"""Two accounts with one of everything, and a person with a role in the first (or none, or
a superuser), to ask what they may see and do in each."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User

from cloud.models import Account, Location, Membership
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from gpus.models import GpuProfile, VgpuReservation
from tests.factories import (
    AccountFactory,
    ClusterSiteFactory,
    GpuProfileFactory,
    LocationFactory,
    MachineFactory,
    MachinePoolFactory,
    MembershipFactory,
    UserFactory,
    VgpuReservationFactory,
)

ROLES = ["viewer", "operator", "admin"]
# What each caller may do, in the order of the roles: each role may do what the one
# before may. "none": a signed-in user who is a member of no account.
LEVEL = {"none": 0, "viewer": 1, "operator": 2, "admin": 3}
CALLERS = ["none", *ROLES, "superuser"]


@dataclass
class Tenant:
    """An account with one of everything: a cluster whose site `site` has a pool with a
    machine and an empty pool, an empty site, a location with no site (for a new one), a
    card, a reservation that no machine holds, and a member."""

    account: Account
    location: Location
    spare_location: Location
    cluster: Cluster
    site: ClusterSite
    empty_site: ClusterSite
    pool: MachinePool
    empty_pool: MachinePool
    machine: Machine
    card: GpuProfile
    reservation: VgpuReservation
    membership: Membership


def tenant_make() -> Tenant:
    site = ClusterSiteFactory()
    cluster, account = site.cluster, site.cluster.account
    pool = MachinePoolFactory(site=site, gpus=True)
    return Tenant(
        account=account,
        location=site.location,
        spare_location=LocationFactory(account=account),
        cluster=cluster,
        site=site,
        empty_site=ClusterSiteFactory(cluster=cluster),
        pool=pool,
        empty_pool=MachinePoolFactory(site=site, replicas=0),
        machine=MachineFactory(pool=pool, phase=Machine.Phase.RUNNING, vm_id=None),
        card=GpuProfileFactory(location=site.location),
        reservation=VgpuReservationFactory(orphaned=True, location=site.location),
        membership=MembershipFactory(account=account, role="viewer"),
    )


@dataclass
class World:
    own: Tenant  # the account the caller has their role in
    other: Tenant  # an account they are no member of


@pytest.fixture
def world(db: None) -> World:
    return World(own=tenant_make(), other=tenant_make())


def caller_make(caller: str, world: World) -> User:
    """A user with `caller`'s role in the own account (none, or a superuser)."""
    if caller == "superuser":
        return UserFactory(is_superuser=True, is_staff=True)  # type: ignore[no-any-return]
    user: User = UserFactory(is_staff=True)
    if caller in ROLES:
        MembershipFactory(user=user, account=world.own.account, role=caller)
    return user


def newcomer_known_to_admins_of(account: Account, username: str | None = None) -> User:
    """A user whom the admins of `account` may give a role there: a member of another
    account they administer (an account admin knows no other user: docs/guides/access.md)."""
    annex = AccountFactory()
    newcomer: User = UserFactory(**({"username": username} if username else {}))
    MembershipFactory(user=newcomer, account=annex, role="viewer")
    for admin in Membership.objects.filter(account=account, role__name="admin"):
        MembershipFactory(user=admin.user, account=annex, role="admin")
    return newcomer
