"""A cluster with one site, made in the database only (no whitesky behind it), and what
a delete of its rows is refused with."""

from __future__ import annotations

import pytest

from capvco_web.models import AuditEvent
from cloud.models import Account, Location
from clusters.models import Cluster, ClusterSite, Machine, MachinePool

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhcGkifQ.c2lnbmF0dXJl"

# What a delete of the `pool` fixture's rows is refused with, from every entry point.
POOL_IN_USE = "pool gpu still has 2 machines (gpu-0, gpu-1): scale it to 0 replicas first"
SITE_IN_USE = "site prod in nl-1 still has 1 pool (gpu): scale it to 0 replicas and delete it first"
ACCOUNT_IN_USE = "account acme still has 1 cluster (prod): delete it first"


def machines_left() -> list[str]:
    return sorted(Machine.objects.values_list("name", flat=True))


def deletes_audited() -> list[str]:
    return list(
        AuditEvent.objects.filter(action__endswith="delete").values_list("action", flat=True)
    )


def empty_pool(site: ClusterSite, name: str = "cpu") -> MachinePool:
    return MachinePool.objects.create(cluster=site.cluster, site=site, name=name, replicas=0)


@pytest.fixture
def site(db: None) -> ClusterSite:
    account = Account.objects.create(
        name="acme", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c1", credential=JWT,
    )  # fmt: skip
    location = Location.objects.create(account=account, name="nl-1")
    cluster = Cluster.objects.create(name="prod", account=account)
    return ClusterSite.objects.create(
        cluster=cluster, location=location, cloudspace_id="cs-1", image_id=1
    )


@pytest.fixture
def pool(site: ClusterSite) -> MachinePool:
    """Pool `gpu` with two running machines (gpu-0, gpu-1)."""
    pool = MachinePool.objects.create(
        cluster=site.cluster, site=site, name="gpu", replicas=2, gpu_type="T4", gpu_count=1
    )
    for index in range(2):
        Machine.objects.create(
            pool=pool, name=f"gpu-{index}", index=index, vm_id=100 + index,
            phase=Machine.Phase.RUNNING,
        )  # fmt: skip
    return pool
