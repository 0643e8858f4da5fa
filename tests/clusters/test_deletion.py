"""Machines, and the rows they hang from, go only through teardown.

A row delete of a site, a pool, a cluster or an account that still has machines (or
clusters, sites, pools) is refused from every entry point (model, service, API, admin),
naming what is in the way and what to do, with every machine left in place and no delete
audited. An empty pool, site or account can be deleted, and that delete is audited.
"""

from __future__ import annotations

import pytest
from django.db.models import ProtectedError

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.models import Account, Location, VirtualMachine
from cloud.services import InUse
from clusters.models import Cluster, ClusterSite, MachinePool
from clusters.services import account_delete, cluster_rows_delete, pool_delete, site_delete
from gpus.models import VgpuReservation
from tests.clusters.conftest import (
    ACCOUNT_IN_USE,
    POOL_IN_USE,
    SITE_IN_USE,
    deletes_audited,
    empty_pool,
    machines_left,
)

pytestmark = pytest.mark.django_db

# --- the model: a row delete never cascades to machines -------------------------------


@pytest.mark.parametrize("parent", ["pool", "site", "cluster"])
def test_row_delete_of_a_machines_parent_is_refused_and_keeps_the_machines(
    pool: MachinePool, parent: str
) -> None:
    row = {"pool": pool, "site": pool.site, "cluster": pool.cluster}[parent]

    with pytest.raises(ProtectedError):
        row.delete()

    assert machines_left() == ["gpu-0", "gpu-1"]
    assert MachinePool.objects.filter(pk=pool.pk).exists()


# --- the services: refuse naming what is in the way, audit what they delete ------------


def test_pool_delete_refuses_naming_its_machines_and_what_to_do(pool: MachinePool) -> None:
    with pytest.raises(InUse) as refused:
        pool_delete(pool=pool, actor=SystemActor.RECONCILER)

    assert str(refused.value) == POOL_IN_USE
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert deletes_audited() == []


def test_pool_delete_of_a_pool_scaled_to_zero_says_to_wait_for_the_teardown(
    pool: MachinePool,
) -> None:
    MachinePool.objects.filter(pk=pool.pk).update(replicas=0)
    pool.refresh_from_db()

    with pytest.raises(InUse, match=r"\(gpu-0, gpu-1\): wait for their teardown to finish"):
        pool_delete(pool=pool, actor=SystemActor.RECONCILER)


def test_site_delete_refuses_naming_its_pools(pool: MachinePool) -> None:
    with pytest.raises(InUse) as refused:
        site_delete(site=pool.site, actor=SystemActor.RECONCILER)

    assert str(refused.value) == SITE_IN_USE
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert deletes_audited() == []


def test_site_delete_refuses_while_its_cloudspace_lists_vms_of_the_cluster(
    site: ClusterSite,
) -> None:
    # A machine deleted with force left its VM; nothing would look for it once the site
    # (the only link from the cluster to that cloudspace) were gone.
    VirtualMachine.objects.create(
        location=site.location, cloudspace_id="cs-1", vm_id=7, name="capvco-prod-gpu-0",
        status="RUNNING",
    )  # fmt: skip
    VirtualMachine.objects.create(
        location=site.location, cloudspace_id="cs-1", vm_id=8, name="bastion", status="RUNNING"
    )

    with pytest.raises(InUse) as refused:
        site_delete(site=site, actor=SystemActor.RECONCILER)

    assert "1 VM (capvco-prod-gpu-0)" in str(refused.value)
    assert ClusterSite.objects.filter(pk=site.pk).exists()
    VirtualMachine.objects.filter(vm_id=7).delete()  # reclaimed: the site may go
    site_delete(site=site, actor=SystemActor.RECONCILER)
    assert not ClusterSite.objects.exists()


def test_empty_pool_then_empty_site_delete_is_audited(site: ClusterSite) -> None:
    pool = empty_pool(site)

    pool_delete(pool=pool, actor=SystemActor.RECONCILER, reason="not needed")
    site_delete(site=site, actor=SystemActor.RECONCILER)

    assert not MachinePool.objects.exists()
    assert not ClusterSite.objects.exists()
    assert Cluster.objects.filter(name="prod").exists()
    pool_event = AuditEvent.objects.get(action="pool.delete")
    assert (pool_event.actor_name, pool_event.reason) == ("reconciler", "not needed")
    assert pool_event.before["name"] == "cpu"
    assert pool_event.before["site"] == "prod in nl-1"
    site_event = AuditEvent.objects.get(action="site.delete")
    assert site_event.before == {
        "cluster": "prod", "location": "nl-1", "cloudspace_id": "cs-1", "image_id": 1
    }  # fmt: skip


def test_account_delete_refuses_while_it_has_clusters(site: ClusterSite) -> None:
    with pytest.raises(InUse) as refused:
        account_delete(account=site.cluster.account, actor=SystemActor.RECONCILER)

    assert str(refused.value) == ACCOUNT_IN_USE
    assert Account.objects.filter(name="acme").exists()
    assert deletes_audited() == []


def test_account_delete_refuses_while_a_reservation_is_not_released(site: ClusterSite) -> None:
    account = site.cluster.account
    site.delete()
    site.cluster.delete()
    VgpuReservation.objects.create(
        location=Location.objects.get(name="nl-1"), name="capvco-old-a-0-gpu-0", vgpu_id="v-1",
        state=VgpuReservation.State.RESERVED,
    )  # fmt: skip

    with pytest.raises(InUse) as refused:
        account_delete(account=account, actor=SystemActor.RECONCILER)

    assert str(refused.value) == (
        "account acme still has 1 vGPU reservation not released "
        "(capvco-old-a-0-gpu-0 in nl-1): release it first"
    )
    assert VgpuReservation.objects.exists()


def test_account_delete_drops_its_mirrors_and_released_reservations_and_is_audited(
    site: ClusterSite,
) -> None:
    account = site.cluster.account
    site.delete()
    site.cluster.delete()
    VgpuReservation.objects.create(
        location=Location.objects.get(name="nl-1"), name="capvco-old-a-0-gpu-0", vgpu_id="v-1",
        state=VgpuReservation.State.RELEASED,
    )  # fmt: skip

    account_delete(account=account, actor=SystemActor.RECONCILER, reason="customer left")

    assert not Account.objects.exists()
    assert not Location.objects.exists()
    assert not VgpuReservation.objects.exists()
    event = AuditEvent.objects.get(action="account.delete")
    assert event.reason == "customer left"
    assert event.before["locations"] == ["nl-1"]
    assert event.before["released_reservations"] == 1


def test_cluster_rows_delete_refuses_while_a_machine_is_left(pool: MachinePool) -> None:
    Cluster.objects.filter(pk=pool.cluster_id).update(state=Cluster.State.DELETING)

    with pytest.raises(InUse, match=r"cluster prod still has 2 machines \(gpu-0, gpu-1\)"):
        cluster_rows_delete(cluster=pool.cluster, actor=SystemActor.RECONCILER, reason="torn down")

    assert machines_left() == ["gpu-0", "gpu-1"]
    assert Cluster.objects.filter(name="prod").exists()
    assert deletes_audited() == []


def test_cluster_rows_delete_refuses_a_cluster_whose_deletion_nobody_asked_for(
    site: ClusterSite,
) -> None:
    with pytest.raises(ValueError, match="not being deleted"):
        cluster_rows_delete(cluster=site.cluster, actor=SystemActor.RECONCILER, reason="torn down")

    assert ClusterSite.objects.filter(pk=site.pk).exists()


def test_cluster_rows_delete_removes_the_cluster_its_pools_and_sites_audited(
    site: ClusterSite,
) -> None:
    empty_pool(site)
    cluster = site.cluster
    Cluster.objects.filter(pk=cluster.pk).update(state=Cluster.State.DELETING)

    cluster_rows_delete(cluster=cluster, actor=SystemActor.RECONCILER, reason="no reservation left")

    assert not Cluster.objects.exists()
    assert not MachinePool.objects.exists()
    assert not ClusterSite.objects.exists()
    event = AuditEvent.objects.get(action="cluster.delete")
    assert (event.actor_name, event.reason) == ("reconciler", "no reservation left")
    assert event.before == {"name": "prod", "account": "acme", "sites": ["nl-1"], "pools": ["cpu"]}
