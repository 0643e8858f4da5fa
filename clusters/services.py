"""Changing clusters and machines, and deleting accounts, on a person's behalf: each
change is allowed by the person's role in the object's account (capvco_web.permissions),
and audited.

Creating and changing a row goes through `<noun>_create` and `<noun>_update`, from the API
and the admin alike (over cloud.services.row_create and row_update): they check the role,
run the model's validation (which refuses, for one, to move a site or a pool), save, and
record the fields set or changed, never the value of a secret.

Machines, and the rows they hang from (pool, site, cluster, account), are deleted only
through teardown: the foreign keys PROTECT, and the deletes here refuse with `InUse`,
naming what is in the way and what to do, while anything still hangs from the row.

A cluster imported from Cluster API (`Cluster.imported_from`), its sites and its pools
change only through the import (actor `IMPORT_ACTOR`): for anyone else the services
here refuse with `ImportedReadOnly`, whichever entry point asks. Its kubeconfig and its
machines (a teardown of one) stay ours to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import MinValueValidator
from django.db import models, transaction
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record, audit_snapshot
from capvco_web.integrations.kube import KubeconfigInvalid, kubeconfig_load
from capvco_web.locks import object_lock
from capvco_web.permissions import permission_require
from capvco_web.rows import model_update
from capvco_web.validators import kubeconfig_checked
from cloud.models import Account, Location, VirtualMachine
from cloud.services import Actor, InUse, counted, listed, row_create, row_update, them
from clusters.models import (
    Cluster,
    ClusterSite,
    Machine,
    MachineDeletion,
    MachinePool,
    replicas_bound,
)
from clusters.selectors import kube_observe_lock
from gpus import naming
from gpus.models import VgpuReservation

M = TypeVar("M", bound=models.Model)

# The one actor that changes imported clusters, sites and pools (clusters.capi_import).
IMPORT_ACTOR = SystemActor.CAPI_IMPORT


class ImportedReadOnly(PermissionDenied):
    """A change refused because the row mirrors a Cluster API object: the management
    cluster owns it. The message says so and where to change it; the API answers 403
    with it, the admin shows it."""


def imported_check(obj: models.Model, actor: Actor) -> None:
    """Raise `ImportedReadOnly` when `obj` (a cluster, site or pool) is imported and the
    actor is not the import."""
    if actor is IMPORT_ACTOR:  # the member, not a string that reads the same
        return
    refusal = getattr(obj, "import_refusal", None)
    if refusal is not None and (message := refusal()):
        raise ImportedReadOnly(message)


def name_confirmed(*, name: str, confirm: str, actor: Actor, what: str) -> None:
    """Refuse a destructive action a person asked for without typing the name of what it
    ends (`confirm`), on the `confirm` field: a reason alone is typed as easily for the
    wrong row. The control plane's own actors act by rule and type nothing.

    A name that is not the object's is a conflict with the row (409 in the API), as a
    well-formed body about another object is; an empty one is missing input (400)."""
    if isinstance(actor, SystemActor):
        return
    typed = confirm.strip()
    if typed != name:
        said = f" ({typed!r} was typed)" if typed else ""
        message = f"Type the {what}'s name, {name}, to confirm{said}."
        code = "conflict" if typed else "required"
        raise ValidationError({"confirm": [ValidationError(message, code=code)]})


def machine_force_delete(
    *,
    machine: Machine,
    actor: User | AnonymousUser | SystemActor,
    reason: str,
    confirm: str = "",
) -> None:
    """Drop a machine without teardown (like `--force`). Its VM and vGPUs stay behind,
    become orphans, and are reclaimed by name (orphan sweep or cluster deletion). A person
    confirms by typing the machine's name (`name_confirmed`)."""
    permission_require(actor, "clusters.force_delete_machine", machine)
    if not reason.strip():
        raise ValueError("A force delete needs a reason.")
    name_confirmed(name=machine.name, confirm=confirm, actor=actor, what="machine")
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


def cluster_delete(
    *,
    cluster: Cluster,
    actor: User | AnonymousUser | SystemActor,
    reason: str,
    confirm: str = "",
) -> None:
    """Ask for a cluster's deletion: the reconciler tears it down and releases every
    reservation carrying its prefix; the cluster stays `deleting` until none is listed. A
    person confirms by typing the cluster's name (`name_confirmed`)."""
    permission_require(actor, "clusters.delete_cluster", cluster)
    imported_check(cluster, actor)
    if not reason.strip():
        raise ValueError("A cluster deletion needs a reason.")
    name_confirmed(name=cluster.name, confirm=confirm, actor=actor, what="cluster")
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
    raise InUse(f"pool {pool.name} still has {counted(names, 'machine')}: {todo}", machines)


def pool_delete(*, pool: MachinePool, actor: Actor, reason: str = "") -> None:
    """Delete a pool that has no machine left. Audited."""
    with transaction.atomic():
        # The row lock makes a machine created meanwhile wait for us, then fail.
        pool = (
            MachinePool.objects.select_for_update().select_related("site__location").get(pk=pool.pk)
        )
        permission_require(actor, "clusters.delete_machinepool", pool)
        imported_check(pool, actor)
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
        it = them(names)
        raise InUse(
            f"site {site} still has {counted(names, 'pool')}: "
            f"scale {it} to 0 replicas and delete {it} first",
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
            f"site {site} still has {counted([vm.name for vm in left], 'VM')} of the cluster "
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
        permission_require(actor, "clusters.delete_clustersite", site)
        imported_check(site, actor)
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
            f"account {account} still has {counted(names, 'cluster')}: delete {them(names)} first",
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
            f"({listed(names)}): release {them(names)} first",
            billed,
        )


def account_delete(*, account: Account, actor: Actor, reason: str = "") -> None:
    """Delete an account with no cluster and no reservation still billed, with its
    locations and their mirrors (cards, VMs, released reservations). Audited."""
    with transaction.atomic():
        account = Account.objects.select_for_update().get(pk=account.pk)
        permission_require(actor, "cloud.delete_account", account)
        account_delete_check(account=account)
        released = VgpuReservation.objects.filter(
            location__account=account, state=VgpuReservation.State.RELEASED
        )
        before: dict[str, Any] = {
            "name": account.name,
            "api_url": account.api_url,
            "customer_id": account.customer_id,
            "locations": list(account.locations.order_by("name").values_list("name", flat=True)),
            "members": [
                str(m) for m in account.memberships.select_related("user", "role").order_by("pk")
            ],
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
    (`cluster_delete`), which would skip the reclaim of its leftovers, and one whose
    Kubernetes a pass is observing (it writes rows naming the cluster: the next try
    deletes it). Audited."""
    with object_lock(kube_observe_lock(cluster.pk)) as free:
        if not free:
            raise InUse(
                f"cluster {cluster.name}: its Kubernetes is being observed; it is deleted "
                "once that pass ends"
            )
        _cluster_rows_delete(cluster=cluster, actor=actor, reason=reason)


def _cluster_rows_delete(*, cluster: Cluster, actor: Actor, reason: str) -> None:
    with transaction.atomic():
        if not Cluster.objects.filter(pk=cluster.pk, state=Cluster.State.DELETING).exists():
            raise ValueError(
                f"cluster {cluster.name} is not being deleted: ask for its deletion first"
            )
        machines = list(Machine.objects.filter(pool__cluster=cluster).order_by("name"))
        if machines:
            names = [m.name for m in machines]
            raise InUse(
                f"cluster {cluster.name} still has {counted(names, 'machine')}: "
                f"tear {them(names)} down first",
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


# --- creating and changing rows ------------------------------------------------------------


def _row_create(obj: M, *, actor: Actor, action: str, reason: str = "") -> M:
    """`row_create`, refusing an imported cluster's rows to anyone but the import."""
    return row_create(
        obj, actor=actor, action=action, reason=reason, check=lambda row: imported_check(row, actor)
    )


def _row_update(obj: M, *, actor: Actor, action: str, reason: str = "") -> M:
    """`row_update`, refusing an imported cluster's rows to anyone but the import."""
    return row_update(
        obj, actor=actor, action=action, reason=reason, check=lambda row: imported_check(row, actor)
    )


def cluster_create(*, cluster: Cluster, actor: Actor, reason: str = "") -> Cluster:
    return _row_create(cluster, actor=actor, action="cluster.create", reason=reason)


def cluster_update(*, cluster: Cluster, actor: Actor, reason: str = "") -> Cluster:
    return _row_update(cluster, actor=actor, action="cluster.update", reason=reason)


def site_create(*, site: ClusterSite, actor: Actor, reason: str = "") -> ClusterSite:
    return _row_create(site, actor=actor, action="site.create", reason=reason)


def site_update(*, site: ClusterSite, actor: Actor, reason: str = "") -> ClusterSite:
    """Save a site's changes; moving it (cluster, location, cloudspace) is refused by
    `ClusterSite.clean`."""
    return _row_update(site, actor=actor, action="site.update", reason=reason)


def _cluster_active_lock(cluster_id: int) -> None:
    """Lock the cluster's row until the transaction ends and refuse (409) while it is being
    deleted: `cluster_delete` waits for the lock, so a pool change either lands before the
    deletion or is refused, never accepted and then dropped by the teardown."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster_id)
    if refusal := cluster.deleting_refusal():
        raise ValidationError(refusal, code="conflict")


def pool_create(*, pool: MachinePool, actor: Actor, reason: str = "") -> MachinePool:
    with transaction.atomic():
        if pool.cluster_id:
            _cluster_active_lock(pool.cluster_id)
        return _row_create(pool, actor=actor, action="pool.create", reason=reason)


def pool_update(*, pool: MachinePool, actor: Actor, reason: str = "") -> MachinePool:
    """Save a pool's changes (its replicas too); moving it (cluster, site) is refused by
    `MachinePool.clean`, and so is any change while its cluster is being deleted.

    With autoscale on, the replicas are the autoscaler's to decide: a change of them is
    refused (change the bounds, or turn autoscale off in the same change). Turning it off
    keeps the machines the autoscaler decided, unless the change gives replicas itself."""
    with transaction.atomic():
        _cluster_active_lock(pool.cluster_id)
        stored = MachinePool.objects.select_related("target").select_for_update(of=("self",))
        before = stored.get(pk=pool.pk)
        if pool.replicas != before.replicas:
            if before.autoscale_enabled and pool.autoscale_enabled:
                raise ValidationError({"replicas": autoscaled_refusal(before)})
        elif before.autoscale_enabled and not pool.autoscale_enabled:
            pool.replicas = before.effective_replicas
        return _row_update(pool, actor=actor, action="pool.update", reason=reason)


def autoscaled_refusal(pool: MachinePool) -> str:
    return (
        f"Pool {pool.name} autoscales between {pool.autoscale_min} and {pool.autoscale_max} "
        f"machines (now {pool.effective_replicas}): change its bounds, or turn autoscale off "
        "to set its replicas."
    )


def pool_scale(*, pool: MachinePool, replicas: int, actor: Actor, reason: str) -> MachinePool:
    """Set a pool's replicas, and nothing else: what an operator may do. The reconciler
    creates the machines missing or tears the surplus down. Audited with the reason."""
    permission_require(actor, "clusters.scale_machinepool", pool)
    imported_check(pool, actor)
    if not reason.strip():
        raise ValueError("Scaling a pool needs a reason.")
    MinValueValidator(0)(replicas)
    replicas_bound(replicas)
    with transaction.atomic():
        _cluster_active_lock(pool.cluster_id)
        pool = MachinePool.objects.select_for_update().get(pk=pool.pk)
        if pool.autoscale_enabled:
            raise ValidationError(autoscaled_refusal(pool))
        before = pool.replicas
        if not model_update(pool, {"replicas": replicas}):
            return pool
        audit_record(
            actor=actor,
            action="pool.scale",
            obj=pool,
            reason=reason,
            before={"replicas": before},
            after={"replicas": replicas},
        )
    return pool


@dataclass
class PoolsScaled:
    """What a bulk scale did: the pools scaled (or already at that size), and each refusal
    naming its pool."""

    scaled: list[str]
    refused: list[str]


def pools_scale(
    *, pools: Sequence[MachinePool], replicas: int, actor: Actor, reason: str
) -> PoolsScaled:
    """One size and one reason for many pools: each scaled by `pool_scale`, checked and
    audited on its own (one event per pool). One it refuses (autoscaled, imported, not the
    actor's to scale, past the limits, its cluster being deleted) is reported, and the
    others still go."""
    if not reason.strip():
        raise ValueError("Scaling a pool needs a reason.")
    # A size no pool may take is the request's fault, said once rather than per pool.
    MinValueValidator(0)(replicas)
    replicas_bound(replicas)
    outcome = PoolsScaled([], [])
    for pool in pools:
        try:
            pool_scale(pool=pool, replicas=replicas, actor=actor, reason=reason)
        except (ValidationError, PermissionDenied) as exc:
            problem = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
            outcome.refused.append(f"{pool.name}: {problem or 'not yours to scale'}")
        else:
            outcome.scaled.append(pool.name)
    return outcome


def machine_delete(*, machine: Machine, actor: Actor, reason: str) -> Machine:
    """Ask for a machine's teardown (its VM deleted, its vGPUs released). The pool keeps its
    replicas, so the reconciler makes a new machine in its place; scale the pool down for
    fewer machines. Audited with the reason."""
    permission_require(actor, "clusters.delete_machine", machine)
    if not reason.strip():
        raise ValueError("Deleting a machine needs a reason.")
    phase = machine.phase
    if machine.delete_requested:
        return machine  # act has taken its teardown up already
    # The request is a row of its own: the machine's row is act's (the plan reads this
    # and act takes it up), so asking never writes under act's compare-and-set.
    _, asked = MachineDeletion.objects.get_or_create(
        machine=machine,
        defaults={
            "requested_by": actor if isinstance(actor, User) else None,
            "requested_at": timezone.now(),
            "reason": reason,
        },
    )
    if asked:
        audit_record(
            actor=actor,
            action="machine.delete_requested",
            obj=machine,
            reason=reason,
            before={"delete_requested": False, "phase": phase},
            after={"delete_requested": True},
        )
    return machine


def cluster_kubeconfig_set(
    *, cluster: Cluster, kubeconfig: str, actor: Actor, reason: str = ""
) -> None:
    """Store (or, empty, remove) the kubeconfig the cluster's nodes and pods are read with.

    The audit record names the API server before and after, never the credential. A new
    kubeconfig may reach another cluster: the observer compares what was mirrored afresh
    (it knows the kubeconfig its resourceVersions are of). Without
    one, nothing is observed: the next Kubernetes observe tick (kube.tasks) drops the
    mirror and the flags it raised.
    """
    permission_require(actor, "clusters.change_cluster", cluster)
    kubeconfig = kubeconfig.strip()
    server_after = _kubeconfig_server_checked(
        kubeconfig, field="kubeconfig", insecure_allowed=_insecure_tls_allowed(cluster.account_id)
    )
    server_before = _kubeconfig_server(cluster.kubeconfig)
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=kubeconfig)
        audit_record(
            actor=actor,
            action="cluster.kubeconfig_set" if kubeconfig else "cluster.kubeconfig_remove",
            obj=cluster,
            reason=reason,
            before={"server": server_before},
            after={"server": server_after},
        )
    cluster.kubeconfig = kubeconfig


def _insecure_tls_allowed(account_id: int) -> bool:
    """Whether the account, as stored, allows kubeconfigs that skip TLS verification."""
    return bool(
        Account.objects.filter(pk=account_id)
        .values_list("kube_insecure_tls_allowed", flat=True)
        .first()
    )


def _kubeconfig_server_checked(kubeconfig: str, *, field: str, insecure_allowed: bool) -> str:
    """The API server of a kubeconfig about to be stored ("" for none); one that cannot be
    used is refused on `field`."""
    if not kubeconfig:
        return ""
    try:
        return kubeconfig_checked(kubeconfig, insecure_allowed=insecure_allowed).server
    except KubeconfigInvalid as exc:
        raise ValidationError({field: str(exc)}) from exc


def _kubeconfig_server(kubeconfig: str) -> str:
    if not kubeconfig:
        return ""
    try:
        return kubeconfig_load(kubeconfig).server
    except KubeconfigInvalid:
        return "(unreadable)"


@dataclass(frozen=True)
class SiteSpec:
    location: Location
    cloudspace_id: str
    image_id: int


@dataclass(frozen=True)
class PoolSpec:
    name: str
    location: Location
    replicas: int
    gpu_type: str = ""
    gpu_count: int = 0
    vcpus: int = 4
    memory_mib: int = 8192
    disk_gib: int = 50


def _validated(obj: models.Model, label: str) -> None:
    """The model's own validation, its errors under `label` (which site, which pool)."""
    try:
        obj.full_clean()
    except ValidationError as exc:
        problems = [
            f"{field}: {message}" if field != "__all__" else message
            for field, messages in exc.message_dict.items()
            for message in messages
        ]
        raise ValidationError({label: problems}) from exc


def cluster_setup(
    *,
    name: str,
    account: Account,
    sites: Sequence[SiteSpec],
    pools: Sequence[PoolSpec],
    actor: Actor,
) -> Cluster:
    """Create a cluster with its sites and pools at once, each checked by its model as the
    API checks it and by the actor's role in the account (an admin's: add cluster, site and
    pool); when anything is refused nothing is made. Each row is audited as the API's
    creates are, the cluster's event naming its sites and pools too."""
    with transaction.atomic():
        cluster = Cluster(name=name, account=account)
        permission_require(actor, "clusters.add_cluster", cluster)
        _validated(cluster, "cluster")
        cluster.save()
        audit_record(
            actor=actor,
            action="cluster.create",
            obj=cluster,
            after={
                **audit_snapshot(cluster),
                "sites": [
                    f"{s.location.name}: cloudspace {s.cloudspace_id}, image {s.image_id}"
                    for s in sites
                ],
                "pools": [
                    f"{p.name} in {p.location.name}: {p.replicas} x "
                    f"{f'{p.gpu_count} {p.gpu_type}' if p.gpu_count else 'no GPU'}"
                    for p in pools
                ],
            },
        )
        by_location: dict[int, ClusterSite] = {}
        for spec in sites:
            site = ClusterSite(
                cluster=cluster,
                location=spec.location,
                cloudspace_id=spec.cloudspace_id,
                image_id=spec.image_id,
            )
            permission_require(actor, "clusters.add_clustersite", site)
            _validated(site, f"site in {spec.location.name}")
            site.save()
            audit_record(actor=actor, action="site.create", obj=site, after=audit_snapshot(site))
            by_location[spec.location.pk] = site
        for pool_spec in pools:
            label = f"pool {pool_spec.name}"
            pool_site = by_location.get(pool_spec.location.pk)
            if pool_site is None:
                raise ValidationError(
                    {label: [f"{pool_spec.location.name} is not one of the cluster's sites."]}
                )
            pool = MachinePool(
                cluster=cluster,
                site=pool_site,
                name=pool_spec.name,
                replicas=pool_spec.replicas,
                gpu_type=pool_spec.gpu_type,
                gpu_count=pool_spec.gpu_count,
                vcpus=pool_spec.vcpus,
                memory_mib=pool_spec.memory_mib,
                disk_gib=pool_spec.disk_gib,
            )
            permission_require(actor, "clusters.add_machinepool", pool)
            _validated(pool, label)
            pool.save()
            audit_record(actor=actor, action="pool.create", obj=pool, after=audit_snapshot(pool))
    return cluster


def cluster_gpu_addon_set(
    *, cluster: Cluster, enabled: bool, actor: Actor, reason: str = ""
) -> Cluster:
    """Turn the cluster's GPU add-on on or off: the next observe pass applies the NVIDIA
    device plugin to its Kubernetes, or removes ours (kube.gpu_addon). Audited; an
    imported cluster's follows its Cluster API label instead."""
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        permission_require(actor, "clusters.change_cluster", cluster)
        imported_check(cluster, actor)
        before = cluster.gpu_addon
        if not model_update(cluster, {"gpu_addon": enabled}):
            return cluster
        audit_record(
            actor=actor,
            action="cluster.gpu_addon_set",
            obj=cluster,
            reason=reason,
            before={"gpu_addon": before},
            after={"gpu_addon": enabled},
        )
    return cluster


def account_capi_kubeconfig_set(
    *, account: Account, kubeconfig: str, actor: Actor, reason: str = ""
) -> None:
    """Store (or, empty, remove) the kubeconfig of the management cluster whose Cluster API
    objects define clusters of this account (clusters.capi_import).

    Audited with the API server before and after, never the credential. Removing it, or
    pointing it at another API server, hands the clusters imported so far over to this
    control plane (`imported_from` cleared, each audited): the new source cannot say
    anything about them, and a listing of another management cluster that lacks them
    must not read as their deletion.
    """
    permission_require(actor, "cloud.change_account", account)
    kubeconfig = kubeconfig.strip()
    server_after = _kubeconfig_server_checked(
        kubeconfig, field="capi_kubeconfig", insecure_allowed=_insecure_tls_allowed(account.pk)
    )
    with transaction.atomic():
        stored = Account.objects.select_for_update().get(pk=account.pk)
        server_before = _kubeconfig_server(stored.capi_kubeconfig)
        fields: dict[str, Any] = {"capi_kubeconfig": kubeconfig}
        if server_after != server_before:
            fields.update(
                capi_import_complete=False,
                capi_import_error="",
                capi_import_started_at=None,
                capi_last_complete_import_at=None,
            )
            for cluster in Cluster.objects.filter(account=stored).exclude(imported_from=""):
                audit_record(
                    actor=actor,
                    action="cluster.import_release",
                    obj=cluster,
                    reason="the account's management cluster changed or was removed",
                    before={"imported_from": cluster.imported_from, "server": server_before},
                    after={"imported_from": ""},
                )
                Cluster.objects.filter(pk=cluster.pk).update(imported_from="")
        Account.objects.filter(pk=stored.pk).update(**fields)
        audit_record(
            actor=actor,
            action=(
                "account.capi_kubeconfig_set" if kubeconfig else "account.capi_kubeconfig_remove"
            ),
            obj=stored,
            reason=reason,
            before={"server": server_before},
            after={"server": server_after},
        )
    account.refresh_from_db()
