"""Cluster API import: clusters and pools defined in an account's management cluster.

Each observe pass, for an account with a management kubeconfig (`Account.capi_kubeconfig`),
four listings (every namespace, paged): `Cluster` and `MachineDeployment`
(cluster.x-k8s.io/v1beta1), `VCOCluster` and `VCOMachineTemplate`
(infrastructure.cluster.x-k8s.io/v1beta1; the shape assumed is docs/guides/capi-crds.yaml).
Then, for every Cluster whose `spec.infrastructureRef` is a VCOCluster:

* the cluster, named as the Cluster, marked `imported_from=<namespace>/<name>`; its GPU
  add-on on while the Cluster carries `capvco.infrastructure.cluster.x-k8s.io/gpu: nvidia`;
* one site, from its VCOCluster: `spec.location` (a location of the account, as whitesky
  lists it), `spec.cloudspaceId`, `spec.imageId`;
* per MachineDeployment of the cluster (`spec.clusterName`, same namespace), a pool
  generation `<name>-g<n>` (the name without a leading `<cluster>-`), sized by its
  VCOMachineTemplate (`spec.template.spec`: vcpus, memoryMiB, diskGiB, gpu) and with the
  MachineDeployment's replicas. Replicas follow the MachineDeployment. Any other change of
  the template (another template, or the same one changed) makes the next generation,
  with the replicas; the older generations keep theirs until every machine of the new one
  runs, are then scaled to 0 (torn down by the reconciler) and deleted once empty.
* A pool generation whose GPUs can never fit in its location (no card of the type, or
  none that holds the count: the rule `MachinePool.clean` refuses a pool made here with)
  is imported all the same, with the condition GpuFits False and that message
  (`gpu_fit_refusal`, judged again each pass, also in `capi_import_error`): no machine is
  made for it, nothing is reserved, and an older generation keeps serving.
* A Cluster being deleted (`deletionTimestamp`), or absent from a complete listing,
  deletes ours through the normal teardown (`cluster_delete`); a MachineDeployment likewise
  scales its generations to 0, and deletes them once empty.

Nothing is deleted nor scaled down from a pass whose listings were not all complete, nor
for an object that could not be read. Every change goes through the services, as the
actor `capi-import`, and is audited; the same services refuse any other actor's change to
an imported row. A problem with one object (a location the account does not have, a name
that is taken) is recorded on the account (`capi_import_error`) and leaves the others be.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from capvco_web.integrations import kube
from capvco_web.integrations.kube import capi
from capvco_web.integrations.kube.client import KubeClient
from capvco_web.rows import model_update
from cloud.models import Account, Location
from cloud.services import InUse
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.services import (
    IMPORT_ACTOR,
    cluster_create,
    cluster_delete,
    cluster_update,
    pool_create,
    pool_delete,
    pool_update,
    site_create,
    site_update,
)
from gpus.resolve import location_fit_refusal

logger = logging.getLogger(__name__)

MAX_POOL_NAME = MachinePool._meta.get_field("name").max_length or 20
# The label that turns the GPU add-on on for an imported cluster (on its Cluster API
# Cluster): the import sets the desired `gpu_addon`, and kube applies it.
CAPI_GPU_LABEL = "capvco.infrastructure.cluster.x-k8s.io/gpu"
CAPI_GPU_LABEL_VALUE = "nvidia"
_TEMPLATE_FIELDS = (
    "vcpus", "memory_mib", "disk_gib", "gpu_type", "gpu_profile_id", "gpu_count",
    "gpu_driver_version",
)  # fmt: skip
KINDS: dict[str, tuple[str, str, str]] = {
    "Cluster": capi.CLUSTERS,
    "MachineDeployment": capi.MACHINE_DEPLOYMENTS,
    capi.VCO_CLUSTER_KIND: capi.VCO_CLUSTERS,
    capi.VCO_TEMPLATE_KIND: capi.VCO_MACHINE_TEMPLATES,
}


class ImportProblem(Exception):
    """One object cannot be imported as it is; the message says why."""


@dataclass
class CapiImportResult:
    account: str
    complete: bool = False
    errors: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    list_calls: int = 0


@dataclass
class _Listed:
    """What the management cluster lists, read; `unreadable` keys per kind."""

    complete: bool
    clusters: dict[str, capi.CapiCluster] = field(default_factory=dict)
    deployments: dict[str, capi.MachineDeployment] = field(default_factory=dict)
    vco_clusters: dict[str, capi.VcoCluster] = field(default_factory=dict)
    templates: dict[str, capi.VcoMachineTemplate] = field(default_factory=dict)
    unreadable: dict[str, set[str]] = field(default_factory=dict)


def account_capi_import(*, client: KubeClient, account: Account) -> CapiImportResult:
    started = timezone.now()
    listings = {
        kind: client.list_custom_objects(group=group, version=version, plural=plural)
        for kind, (group, version, plural) in KINDS.items()
    }
    result = CapiImportResult(
        account=account.name,
        complete=all(listing.complete for listing in listings.values()),
        list_calls=sum(listing.calls for listing in listings.values()),
    )
    for kind, listing in listings.items():
        if listing.error is not None:
            result.errors.append(f"{kind}: {listing.error}")
    listed = _read(listings, result)
    for found in listed.clusters.values():
        if found.deleting or not _vco(found):
            continue
        try:
            with transaction.atomic():
                _cluster_apply(account, found, listed, result)
        except (ImportProblem, ValidationError, InUse) as exc:
            result.errors.append(f"Cluster {found.key}: {_message(exc)}")
    _clusters_gone(account, listed, result)
    stamp: dict[str, Any] = {
        "capi_import_complete": result.complete,
        "capi_import_error": "; ".join(result.errors)[:5000],
        "capi_import_started_at": started,
    }
    if result.complete:
        stamp["capi_last_complete_import_at"] = started
    Account.objects.filter(pk=account.pk).update(**stamp)
    for change in result.changes:
        logger.info("capi import of %s: %s", account.name, change)
    for problem in result.errors:
        logger.warning("capi import of %s: %s", account.name, problem)
    return result


def _message(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return " ".join(exc.messages)
    return str(exc)


def _read(
    listings: Mapping[str, kube.Listing[Mapping[str, Any]]], result: CapiImportResult
) -> _Listed:
    listed = _Listed(complete=result.complete)
    parsers: dict[str, tuple[Callable[[Mapping[str, Any]], Any], dict[str, Any]]] = {
        "Cluster": (capi.parse_capi_cluster, listed.clusters),
        "MachineDeployment": (capi.parse_machine_deployment, listed.deployments),
        capi.VCO_CLUSTER_KIND: (capi.parse_vco_cluster, listed.vco_clusters),
        capi.VCO_TEMPLATE_KIND: (capi.parse_vco_machine_template, listed.templates),
    }
    for kind, listing in listings.items():
        parse, into = parsers[kind]
        for obj in listing.items:
            key = capi.object_key(obj)
            try:
                into[key or ""] = parse(obj)
            except capi.CapiObjectInvalid as exc:
                result.errors.append(str(exc))
                listed.unreadable.setdefault(kind, set()).add(key or "")
    return listed


def _vco(found: capi.CapiCluster) -> bool:
    """Whether its infrastructure is ours: clusters of other providers are not imported."""
    return found.infrastructure is not None and found.infrastructure.kind == capi.VCO_CLUSTER_KIND


def _cluster_apply(
    account: Account, found: capi.CapiCluster, listed: _Listed, result: CapiImportResult
) -> None:
    assert found.infrastructure is not None
    vco = listed.vco_clusters.get(str(found.infrastructure))
    if vco is None:
        raise ImportProblem(f"its {capi.VCO_CLUSTER_KIND} {found.infrastructure} is not listed")
    location = Location.objects.filter(account=account, name=vco.location).first()
    if location is None:
        raise ImportProblem(
            f"location {vco.location} of {capi.VCO_CLUSTER_KIND} {found.infrastructure} is not "
            f"one of account {account.name}'s locations (as whitesky lists them)"
        )
    gpu_addon = found.labels.get(CAPI_GPU_LABEL) == CAPI_GPU_LABEL_VALUE
    reason = f"Cluster API Cluster {found.key}"
    cluster = Cluster.objects.filter(account=account, imported_from=found.key).first()
    if cluster is None:
        cluster = cluster_create(
            cluster=Cluster(
                name=found.name, account=account, gpu_addon=gpu_addon, imported_from=found.key
            ),
            actor=IMPORT_ACTOR,
            reason=f"imported from {reason}",
        )
        result.changes.append(f"cluster {cluster.name} created from {reason}")
    elif cluster.state != Cluster.State.ACTIVE:
        return  # being torn down: nothing more is made for it
    elif cluster.gpu_addon != gpu_addon:
        cluster.gpu_addon = gpu_addon
        cluster_update(
            cluster=cluster, actor=IMPORT_ACTOR, reason=f"label {CAPI_GPU_LABEL} of {reason}"
        )
        result.changes.append(f"cluster {cluster.name}: GPU add-on {'on' if gpu_addon else 'off'}")
    site = _site_apply(cluster, location, vco, result)
    wanted: set[str] = set()
    for deployment in listed.deployments.values():
        if (deployment.namespace, deployment.cluster_name) != (found.namespace, found.name):
            continue
        if deployment.deleting:
            continue  # its generations are drained below, as for one that is gone
        wanted.add(deployment.key)
        try:
            with transaction.atomic():
                _deployment_apply(cluster, site, deployment, listed, result)
        except (ImportProblem, ValidationError, InUse) as exc:
            result.errors.append(f"MachineDeployment {deployment.key}: {_message(exc)}")
    may_drain = listed.complete and not listed.unreadable.get("MachineDeployment")
    for key in _pool_sources(cluster) - wanted:
        deleting = listed.deployments.get(key)
        if may_drain or (deleting is not None and deleting.deleting):
            _generations_drain(_generations(cluster, key), result, current=None)


def _site_apply(
    cluster: Cluster, location: Location, vco: capi.VcoCluster, result: CapiImportResult
) -> ClusterSite:
    sites = list(ClusterSite.objects.filter(cluster=cluster).select_related("location"))
    site = next((s for s in sites if s.location_id == location.pk), None)
    where = f"{capi.VCO_CLUSTER_KIND} {vco.namespace}/{vco.name}"
    if site is None and sites:
        raise ImportProblem(
            f"{where} moved from location {sites[0].location.name} to {location.name}: a site "
            "cannot move (its VMs live in its cloudspace); make a new Cluster instead"
        )
    if site is None:
        site = site_create(
            site=ClusterSite(
                cluster=cluster,
                location=location,
                cloudspace_id=vco.cloudspace_id,
                image_id=vco.image_id,
            ),
            actor=IMPORT_ACTOR,
            reason=f"imported from {where}",
        )
        result.changes.append(f"cluster {cluster.name}: site in {location.name}")
        return site
    if site.cloudspace_id != vco.cloudspace_id:
        raise ImportProblem(
            f"{where} moved from cloudspace {site.cloudspace_id} to {vco.cloudspace_id}: a "
            "site cannot move (its VMs live in its cloudspace); make a new Cluster instead"
        )
    if site.image_id != vco.image_id:
        site.image_id = vco.image_id
        site_update(site=site, actor=IMPORT_ACTOR, reason=f"spec.imageId of {where}")
        result.changes.append(f"cluster {cluster.name}: image {vco.image_id} for new VMs")
    return site


def pool_base_name(cluster: str, deployment: str) -> str:
    """The pool name of a MachineDeployment, without the generation: its name, less a
    leading `<cluster>-` (CAPI's templates name them `<cluster>-md-0`)."""
    rest = deployment.removeprefix(f"{cluster}-")
    return rest or deployment


def _deployment_apply(
    cluster: Cluster,
    site: ClusterSite,
    deployment: capi.MachineDeployment,
    listed: _Listed,
    result: CapiImportResult,
) -> None:
    ref = deployment.template
    if ref is None or ref.kind != capi.VCO_TEMPLATE_KIND:
        raise ImportProblem(
            f"spec.template.spec.infrastructureRef must name a {capi.VCO_TEMPLATE_KIND}"
        )
    template = listed.templates.get(str(ref))
    if template is None:
        raise ImportProblem(f"its {capi.VCO_TEMPLATE_KIND} {ref} is not listed")
    wanted = {
        "vcpus": template.vcpus,
        "memory_mib": template.memory_mib,
        "disk_gib": template.disk_gib,
        "gpu_type": template.gpu.type,
        "gpu_profile_id": template.gpu.profile_id,
        "gpu_count": template.gpu.count,
        "gpu_driver_version": template.gpu.driver_version,
    }
    generations = _generations(cluster, deployment.key)
    current = generations[-1] if generations else None
    reason = f"Cluster API MachineDeployment {deployment.key}"
    # The rule a pool made here meets (MachinePool.clean): here it is the pool's
    # condition, judged again each pass, and while it fails no machine is made.
    fit = location_fit_refusal(
        site.location,
        count=template.gpu.count,
        gpu_type=template.gpu.type,
        profile_id=template.gpu.profile_id,
    )
    refusal = fit.message if fit is not None else ""
    if current is None or current.site_id != site.pk or _differs(current, wanted):
        number = current.import_generation + 1 if current else 1
        name = f"{pool_base_name(cluster.name, deployment.name)}-g{number}"
        if len(name) > MAX_POOL_NAME:
            raise ImportProblem(
                f"its pool would be named {name}, longer than {MAX_POOL_NAME} characters: "
                "give the MachineDeployment a shorter name"
            )
        current = pool_create(
            pool=MachinePool(
                cluster=cluster,
                site=site,
                name=name,
                replicas=deployment.replicas,
                imported_from=deployment.key,
                import_generation=number,
                capi_sriov_secret_ref=template.sriov_secret_ref,
                gpu_fit_refusal=refusal,
                **wanted,
            ),
            actor=IMPORT_ACTOR,
            reason=f"{reason}, {capi.VCO_TEMPLATE_KIND} {ref}",
        )
        generations.append(current)
        result.changes.append(f"cluster {cluster.name}: pool {name} ({reason})")
    else:
        if current.replicas != deployment.replicas:
            current.replicas = deployment.replicas
            pool_update(pool=current, actor=IMPORT_ACTOR, reason=f"spec.replicas of {reason}")
            result.changes.append(
                f"pool {cluster.name}/{current.name}: {deployment.replicas} replicas"
            )
        # Records only, not something a person sets: no audit of their own.
        model_update(
            current,
            {"capi_sriov_secret_ref": template.sriov_secret_ref, "gpu_fit_refusal": refusal},
        )
    if refusal:
        result.errors.append(
            f"MachineDeployment {deployment.key}: pool {cluster.name}/{current.name} GpuFits "
            f"False: {refusal}"
        )
    _generations_drain(generations[:-1], result, current=current)


def _differs(pool: MachinePool, wanted: Mapping[str, Any]) -> bool:
    return any(getattr(pool, name) != wanted[name] for name in _TEMPLATE_FIELDS)


def _generations(cluster: Cluster, source: str) -> list[MachinePool]:
    return list(
        MachinePool.objects.filter(cluster=cluster, imported_from=source).order_by(
            "import_generation"
        )
    )


def _pool_sources(cluster: Cluster) -> set[str]:
    return set(
        MachinePool.objects.filter(cluster=cluster)
        .exclude(imported_from="")
        .values_list("imported_from", flat=True)
    )


def _generations_drain(
    old: Iterable[MachinePool], result: CapiImportResult, *, current: MachinePool | None
) -> None:
    """Scale the older generations to 0 once every machine of the current one runs (at
    once when there is no current one: its MachineDeployment is gone), and delete each
    once its machines are torn down."""
    old = list(old)
    if not old:
        return
    if current is not None:
        running = current.machines.filter(
            phase=Machine.Phase.RUNNING, delete_requested=False, deletion=None
        ).count()
        if running < current.replicas:
            return  # the new generation is not up yet: the old one keeps serving
    for pool in old:
        label = f"pool {pool.cluster.name}/{pool.name}"
        if pool.replicas:
            pool.replicas = 0
            why = (
                f"generation {current.import_generation} runs"
                if current
                else "its MachineDeployment is gone"
            )
            pool_update(pool=pool, actor=IMPORT_ACTOR, reason=f"Cluster API: {why}")
            result.changes.append(f"{label}: scaled to 0 ({why})")
        if not pool.machines.exists():
            pool_delete(
                pool=pool, actor=IMPORT_ACTOR, reason="Cluster API: an empty old generation"
            )
            result.changes.append(f"{label}: deleted")


def _clusters_gone(account: Account, listed: _Listed, result: CapiImportResult) -> None:
    unreadable = listed.unreadable.get("Cluster", set())
    for cluster in Cluster.objects.filter(account=account, state=Cluster.State.ACTIVE).exclude(
        imported_from=""
    ):
        found = listed.clusters.get(cluster.imported_from)
        if found is not None and found.deleting:
            why = f"Cluster API Cluster {cluster.imported_from} is being deleted"
        elif found is None and listed.complete and cluster.imported_from not in unreadable:
            why = f"Cluster API Cluster {cluster.imported_from} no longer exists"
        else:
            continue
        cluster_delete(cluster=cluster, actor=IMPORT_ACTOR, reason=why)
        result.changes.append(f"cluster {cluster.name}: deletion requested ({why})")
