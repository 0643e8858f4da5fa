"""Changing clusters and machines on a person's behalf: each change is audited.

Machines, and the rows they hang from (pool, site, cluster, account), are deleted only
through teardown: the foreign keys PROTECT, and the deletes here refuse with `InUse`,
naming what is in the way and what to do, while anything still hangs from the row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import ProtectedError

from capvco_web.audit import audit_record
from capvco_web.integrations.kube import KubeconfigInvalid, kubeconfig_load
from clusters.models import (
    Account,
    Cluster,
    ClusterSite,
    KubeNode,
    KubePod,
    Machine,
    MachinePool,
    VirtualMachine,
)
from gpus import naming
from gpus.models import VgpuReservation

Actor = User | AnonymousUser | str


class InUse(ProtectedError):
    """A delete refused because something still hangs from the object. The message names
    what is in the way and what to do; the API answers 409 with it, the admin shows it.

    A `ProtectedError`, so that every entry point that handles a foreign key's PROTECT
    handles this refusal the same way.
    """

    def __init__(self, message: str, in_the_way: Iterable[models.Model] = ()) -> None:
        super().__init__(message, set(in_the_way))
        self.message = message

    def __str__(self) -> str:
        return self.message


def _listed(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return f"{shown} and {len(names) - most} more" if len(names) > most else shown


def _counted(names: Sequence[str], noun: str) -> str:
    """`2 machines (gpu-0, gpu-1)`."""
    plural = noun if len(names) == 1 else f"{noun}s"
    return f"{len(names)} {plural} ({_listed(names)})"


def _them(names: Sequence[str]) -> str:
    return "it" if len(names) == 1 else "them"


def machine_force_delete(
    *, machine: Machine, actor: User | AnonymousUser | str, reason: str
) -> None:
    """Drop a machine without teardown (like `--force`). Its VM and vGPUs stay behind,
    become orphans, and are reclaimed by name (orphan sweep or cluster deletion)."""
    if not reason.strip():
        raise ValueError("A force delete needs a reason.")
    before = {
        "name": machine.name,
        "pool": machine.pool.name,
        "vm_id": machine.vm_id,
        "phase": machine.phase,
    }
    with transaction.atomic():
        audit_record(
            actor=actor, action="machine.force_delete", obj=machine, reason=reason, before=before
        )
        machine.delete()


def cluster_delete(*, cluster: Cluster, actor: User | AnonymousUser | str, reason: str) -> None:
    """Ask for a cluster's deletion: the reconciler tears it down and releases every
    reservation carrying its prefix; the cluster stays `deleting` until none is listed."""
    if not reason.strip():
        raise ValueError("A cluster deletion needs a reason.")
    updated = Cluster.objects.filter(pk=cluster.pk, state=Cluster.State.ACTIVE).update(
        state=Cluster.State.DELETING
    )
    if updated:
        cluster.state = Cluster.State.DELETING
        audit_record(
            actor=actor,
            action="cluster.delete_requested",
            obj=cluster,
            reason=reason,
            before={"state": Cluster.State.ACTIVE},
            after={"state": Cluster.State.DELETING},
        )


def pool_delete_check(*, pool: MachinePool) -> None:
    """Raise `InUse` while the pool has machines: each is torn down first (its VM deleted,
    its vGPUs released), which scaling the pool to 0 replicas does."""
    machines = list(pool.machines.order_by("index"))
    if not machines:
        return
    names = [m.name for m in machines]
    todo = (
        "scale it to 0 replicas first"
        if pool.replicas
        else f"wait for {'its' if len(names) == 1 else 'their'} teardown to finish"
    )
    raise InUse(f"pool {pool.name} still has {_counted(names, 'machine')}: {todo}", machines)


def pool_delete(*, pool: MachinePool, actor: Actor, reason: str = "") -> None:
    """Delete a pool that has no machine left. Audited."""
    with transaction.atomic():
        # The row lock makes a machine created meanwhile wait for us, then fail.
        pool = (
            MachinePool.objects.select_for_update().select_related("site__location").get(pk=pool.pk)
        )
        pool_delete_check(pool=pool)
        before = {
            "name": pool.name,
            "cluster": pool.cluster.name,
            "site": str(pool.site),
            "replicas": pool.replicas,
            "gpu_type": pool.gpu_type,
            "gpu_count": pool.gpu_count,
        }
        audit_record(actor=actor, action="pool.delete", obj=pool, reason=reason, before=before)
        pool.delete()


def site_delete_check(*, site: ClusterSite) -> None:
    """Raise `InUse` while the site has pools (their machines live in its cloudspace), or
    while its cloudspace still lists VMs named for the cluster (left by a force delete):
    once the site is gone nothing would look for them there."""
    pools = list(site.pools.order_by("name"))
    if pools:
        names = [p.name for p in pools]
        them = _them(names)
        raise InUse(
            f"site {site} still has {_counted(names, 'pool')}: "
            f"scale {them} to 0 replicas and delete {them} first",
            pools,
        )
    prefix = f"{naming.PREFIX}{site.cluster.name}-"
    left = list(
        VirtualMachine.objects.filter(
            location=site.location_id, cloudspace_id=site.cloudspace_id, name__startswith=prefix
        ).order_by("name")
    )
    if left:
        raise InUse(
            f"site {site} still has {_counted([vm.name for vm in left], 'VM')} of the cluster "
            f"in cloudspace {site.cloudspace_id}: orphans, removed by the orphan sweep or by "
            "deleting the cluster; delete the site after that",
            left,
        )


def site_delete(*, site: ClusterSite, actor: Actor, reason: str = "") -> None:
    """Delete a site that has no pool left. Audited."""
    with transaction.atomic():
        site = (
            ClusterSite.objects.select_for_update()
            .select_related("cluster", "location")
            .get(pk=site.pk)
        )
        site_delete_check(site=site)
        before = {
            "cluster": site.cluster.name,
            "location": site.location.name,
            "cloudspace_id": site.cloudspace_id,
            "image_id": site.image_id,
        }
        audit_record(actor=actor, action="site.delete", obj=site, reason=reason, before=before)
        site.delete()


def account_delete_check(*, account: Account) -> None:
    """Raise `InUse` while the account has clusters, or vGPU reservations not released:
    without the account nobody would watch, or stop, what whitesky still bills."""
    clusters = list(account.clusters.order_by("name"))
    if clusters:
        names = [c.name for c in clusters]
        raise InUse(
            f"account {account} still has {_counted(names, 'cluster')}: "
            f"delete {_them(names)} first",
            clusters,
        )
    billed = list(
        VgpuReservation.objects.filter(location__account=account)
        .exclude(state=VgpuReservation.State.RELEASED)
        .select_related("location")
        .order_by("name")
    )
    if billed:
        names = [f"{r.name} in {r.location.name}" for r in billed]
        plural = "reservation" if len(names) == 1 else "reservations"
        raise InUse(
            f"account {account} still has {len(names)} vGPU {plural} not released "
            f"({_listed(names)}): release {_them(names)} first",
            billed,
        )


def account_delete(*, account: Account, actor: Actor, reason: str = "") -> None:
    """Delete an account with no cluster and no reservation still billed, with its
    locations and their mirrors (cards, VMs, released reservations). Audited."""
    with transaction.atomic():
        account = Account.objects.select_for_update().get(pk=account.pk)
        account_delete_check(account=account)
        released = VgpuReservation.objects.filter(
            location__account=account, state=VgpuReservation.State.RELEASED
        )
        before: dict[str, Any] = {
            "name": account.name,
            "api_url": account.api_url,
            "customer_id": account.customer_id,
            "locations": list(account.locations.order_by("name").values_list("name", flat=True)),
            "released_reservations": released.count(),
        }
        audit_record(
            actor=actor, action="account.delete", obj=account, reason=reason, before=before
        )
        # Released reservations are history (their releases are audited); they would
        # otherwise hold on to their location.
        released.delete()
        account.delete()


def cluster_rows_delete(*, cluster: Cluster, actor: Actor, reason: str) -> None:
    """The last step of a cluster's teardown: delete the cluster with its pools and sites,
    once no machine is left. Refuses a cluster whose deletion was not asked for
    (`cluster_delete`), which would skip the reclaim of its leftovers. Audited."""
    with transaction.atomic():
        if not Cluster.objects.filter(pk=cluster.pk, state=Cluster.State.DELETING).exists():
            raise ValueError(
                f"cluster {cluster.name} is not being deleted: ask for its deletion first"
            )
        machines = list(Machine.objects.filter(pool__cluster=cluster).order_by("name"))
        if machines:
            names = [m.name for m in machines]
            raise InUse(
                f"cluster {cluster.name} still has {_counted(names, 'machine')}: "
                f"tear {_them(names)} down first",
                machines,
            )
        pools = MachinePool.objects.filter(cluster=cluster)
        sites = ClusterSite.objects.filter(cluster=cluster)
        before = {
            "name": cluster.name,
            "account": cluster.account.name,
            "sites": list(
                sites.order_by("location__name").values_list("location__name", flat=True)
            ),
            "pools": list(pools.order_by("name").values_list("name", flat=True)),
        }
        audit_record(
            actor=actor, action="cluster.delete", obj=cluster, reason=reason, before=before
        )
        pools.delete()
        sites.delete()
        cluster.delete()


def cluster_kubeconfig_set(
    *, cluster: Cluster, kubeconfig: str, actor: Actor, reason: str = ""
) -> None:
    """Store (or, empty, remove) the kubeconfig the cluster's nodes and pods are read with.

    The audit record names the API server before and after, never the credential. A new
    kubeconfig may reach another cluster: what was mirrored is compared afresh. Without
    one, nothing is observed, so the mirror and the flags it raised are dropped.
    """
    kubeconfig = kubeconfig.strip()
    server_after = ""
    if kubeconfig:
        try:
            server_after = kubeconfig_load(kubeconfig).server
        except KubeconfigInvalid as exc:
            raise ValidationError({"kubeconfig": str(exc)}) from exc
    server_before = _kubeconfig_server(cluster.kubeconfig)
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(
            kubeconfig=kubeconfig, kube_nodes_resource_version="", kube_pods_resource_version=""
        )
        if not kubeconfig:
            KubeNode.objects.filter(cluster=cluster).delete()
            KubePod.objects.filter(cluster=cluster).delete()
            Machine.objects.filter(pool__cluster=cluster).update(
                node_missing=False, node_missing_reason=""
            )
            Cluster.objects.filter(pk=cluster.pk).update(
                kube_observation_complete=False, kube_observation_error=""
            )
        audit_record(
            actor=actor,
            action="cluster.kubeconfig_set" if kubeconfig else "cluster.kubeconfig_remove",
            obj=cluster,
            reason=reason,
            before={"server": server_before},
            after={"server": server_after},
        )
    cluster.kubeconfig = kubeconfig
    cluster.kube_nodes_resource_version = cluster.kube_pods_resource_version = ""


def _kubeconfig_server(kubeconfig: str) -> str:
    if not kubeconfig:
        return ""
    try:
        return kubeconfig_load(kubeconfig).server
    except KubeconfigInvalid:
        return "(unreadable)"
