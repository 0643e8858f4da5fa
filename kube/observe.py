"""Observe a workload cluster: mirror its nodes and pods, and link nodes to machines.

One node listing and one pod listing (of every namespace) per cluster and pass, each
read in pages. Both are listed first, then written in one transaction, stamped with the
time the listings began. A listing that did not complete adds and updates what it shows
and removes nothing; only a complete one says a node or pod is gone, and only for rows
last written before it began.

A pass over an unchanged cluster writes nothing but the cluster's stamp: a complete
listing whose resourceVersion is the one last mirrored is not compared at all, and
otherwise a row is written only when a mirrored field differs (a node's heartbeat moves
its resourceVersion, not what we keep).

A kind whose watch stamp is fresh (kube.watch: the watch process lists it once
and keeps it current from its watch) is not listed here: its rows are the watch's, and
the flags are raised from them as from a complete listing begun at the stamp. When the
watch process is not running, its stamps go stale and this pass lists as it always did.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from capvco_web.integrations import kube
from capvco_web.rows import fields_assign
from clusters.models import Cluster
from kube.gpu_nodes import node_gpu_flags
from kube.gpu_verify import gpu_verify_wanted, verify_jobs_list, verify_jobs_sync
from kube.models import ClusterObservation, KubeNode, KubePod
from kube.nodes import NodeOwners, node_owners_flag
from kube.selectors import cluster_observation, kube_watched

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

logger = logging.getLogger(__name__)

BATCH = 1000
POD_FIELDS = (
    "namespace",
    "name",
    "node_name",
    "phase",
    "gpu_requests",
    "sriov_network",
    "gpu_type",
    "daemon",
    "labels",
)


@dataclass
class KubeObservationResult:
    cluster: str
    complete: bool
    errors: list[str] = field(default_factory=list)
    writes: int = 0
    """Row writes beyond the one that stamps the cluster with this pass."""
    list_calls: int = 0
    unchanged: list[str] = field(default_factory=list)
    """The listings (`nodes`, `pods`) skipped because their resourceVersion was mirrored."""
    nodes_complete: bool = False
    watched: list[str] = field(default_factory=list)
    """The kinds not listed: the watch process keeps their mirror current (kube.watch)."""


def kubeconfig_sha256(kubeconfig: str) -> str:
    return hashlib.sha256(kubeconfig.encode()).hexdigest()


def cluster_kube_observe(*, client: KubeClient, cluster: Cluster) -> KubeObservationResult:
    # The resourceVersions mirrored, if listed with this kubeconfig: another kubeconfig may
    # reach another cluster, whose listings are compared afresh.
    observation = cluster_observation(cluster)
    digest = kubeconfig_sha256(cluster.kubeconfig)
    same = observation.kubeconfig_sha256 == digest
    nodes_version = observation.nodes_resource_version if same else ""
    pods_version = observation.pods_resource_version if same else ""
    # A kind the watch process keeps current is not listed: its mirror is whole as of the
    # watch's stamp, which stands for when its listing began.
    watched = kube_watched(cluster, now=timezone.now())
    nodes_started = watched.get("nodes") or timezone.now()
    nodes = _watched(nodes_version) if "nodes" in watched else client.list_nodes()
    pods_started = watched.get("pods") or timezone.now()
    pods = _watched(pods_version) if "pods" in watched else client.list_pods()
    # The GPU verification Jobs (kube.gpu_verify): listed after the nodes and pods, so that
    # a Job seen finished is judged with the node as listed before it.
    verify_started = timezone.now()
    verify = verify_jobs_list(client) if gpu_verify_wanted(cluster) else None
    result = KubeObservationResult(
        cluster=cluster.name,
        complete=nodes.complete and pods.complete,
        list_calls=nodes.calls + pods.calls,
        nodes_complete=nodes.complete,
        watched=sorted(watched),
    )
    for what, listing in (("nodes", nodes), ("pods", pods)):
        if listing.error is not None:
            result.errors.append(f"{what}: {listing.error}")
    stamp: dict[str, Any] = {
        "complete": result.complete,
        "error": "; ".join(result.errors),
        "started_at": min(nodes_started, pods_started),
        "nodes_resource_version": nodes_version,
        "pods_resource_version": pods_version,
        "kubeconfig_sha256": digest,
        "gpu_verify_listed_at": verify_started if verify and verify.complete else None,
    }
    if verify is not None:
        result.list_calls += verify.jobs.calls + verify.pods.calls
        for what, listing in (("gpu verification jobs", verify.jobs), ("their pods", verify.pods)):
            if listing.error is not None:
                result.errors.append(f"{what}: {listing.error}")
    with transaction.atomic():
        # The machines the nodes are linked to, held until this commits: one deleted
        # meanwhile is waited for and then not seen, never linked once gone.
        owners = NodeOwners.load(cluster, hold=True)
        now = timezone.now()
        if "nodes" in watched:
            pass  # the watch wrote its rows
        elif _unchanged(nodes, nodes_version):
            result.unchanged.append("nodes")
        else:
            result.writes += nodes_sync(
                cluster=cluster, listing=nodes, listed_at=nodes_started, now=now
            )
        if "pods" in watched:
            pass
        elif _unchanged(pods, pods_version):
            result.unchanged.append("pods")
        else:
            result.writes += pods_sync(
                cluster=cluster, listing=pods, listed_at=pods_started, now=now
            )
        if verify is not None:
            result.writes += verify_jobs_sync(cluster=cluster, listing=verify, now=now)
        result.writes += node_owners_flag(
            cluster=cluster,
            complete=nodes.complete,
            listed_at=nodes_started,
            now=now,
            join_timeout=timedelta(seconds=settings.NODE_JOIN_TIMEOUT_SECONDS),
            owners=owners,
        ).writes
        result.writes += node_gpu_flags(
            cluster=cluster,
            complete=nodes.complete,
            listed_at=nodes_started,
            now=now,
            timeout=timedelta(seconds=settings.GPU_ADVERTISE_TIMEOUT_SECONDS),
        )
        # One write per cluster and pass: when its listings began, and whether whole.
        if nodes.complete:
            stamp["nodes_resource_version"] = nodes.resource_version
        if pods.complete:
            stamp["pods_resource_version"] = pods.resource_version
        if result.complete:
            stamp["last_complete_at"] = min(nodes_started, pods_started)
        observation_record(cluster, stamp)
    for problem in result.errors:
        logger.warning("observe kubernetes of %s: %s", cluster.name, problem)
    return result


def observation_record(cluster: Cluster, stamp: Mapping[str, Any]) -> None:
    """Stamp the cluster's observation: one write (its row made at the first)."""
    if not ClusterObservation.objects.filter(pk=cluster.pk).update(**stamp):
        ClusterObservation.objects.create(cluster=cluster, **stamp)
    # The row read with the cluster says what was written; "no row", read before the
    # first stamp made it, is forgotten so that the next read finds it.
    cached = Cluster.kube_observation.related
    if cached.is_cached(cluster):
        if (held := cached.get_cached_value(cluster)) is not None:
            fields_assign(held, stamp)
        else:
            cached.delete_cached_value(cluster)


def _watched(mirrored: str) -> kube.Listing[Any]:
    """What stands for the listing of a watched kind: complete, nothing in it to write
    (never given to nodes_sync or pods_sync), the mirrored resourceVersion kept."""
    return kube.Listing((), complete=True, resource_version=mirrored)


def _unchanged(listing: kube.Listing[Any], mirrored: str) -> bool:
    return listing.complete and bool(mirrored) and listing.resource_version == mirrored


def nodes_sync(
    *, cluster: Cluster, listing: kube.Listing[kube.Node], listed_at: datetime, now: datetime
) -> int:
    """Mirror the listed nodes; from a complete listing, drop the rows it no longer shows."""
    existing = {row.name: row for row in KubeNode.objects.filter(cluster=cluster)}
    to_create: list[KubeNode] = []
    to_update: list[KubeNode] = []
    fields: set[str] = set()
    for node in listing.items:
        data = node_row_data(node)
        row = existing.pop(node.name, None)
        if row is None:
            to_create.append(
                KubeNode(cluster=cluster, name=node.name, first_seen_at=now, updated_at=now, **data)
            )
        elif row.updated_at > listed_at:
            continue  # written after the listing began: newer than what it shows
        else:
            if row.uid != node.uid:  # another node of the same name: a replacement
                data["first_seen_at"] = now
            if changed := fields_assign(row, data):
                row.updated_at = now
                fields.update(changed)
                to_update.append(row)
    KubeNode.objects.bulk_create(to_create, batch_size=BATCH)
    if to_update:
        KubeNode.objects.bulk_update(to_update, sorted(fields | {"updated_at"}), batch_size=BATCH)
    gone = [row.pk for row in existing.values() if row.updated_at <= listed_at]
    if not listing.complete:
        gone = []
    _delete(KubeNode, gone)
    return len(to_create) + len(to_update) + len(gone)


def pods_sync(
    *, cluster: Cluster, listing: kube.Listing[kube.Pod], listed_at: datetime, now: datetime
) -> int:
    """Mirror the listed pods (by uid); from a complete listing, drop the rows it no longer
    shows. Rows are read as tuples: a cluster has thousands of pods."""
    existing: dict[str, tuple[int, tuple[Any, ...], datetime]] = {
        row[1]: (row[0], tuple(row[2:-1]), row[-1])
        for row in KubePod.objects.filter(cluster=cluster).values_list(
            "pk", "uid", *POD_FIELDS, "updated_at"
        )
    }
    to_create: list[KubePod] = []
    to_update: list[KubePod] = []
    for pod in listing.items:
        values = pod_row_values(pod)
        found = existing.pop(pod.uid, None)
        data = dict(zip(POD_FIELDS, values, strict=True))
        if found is None:
            to_create.append(
                KubePod(cluster=cluster, uid=pod.uid, first_seen_at=now, updated_at=now, **data)
            )
            continue
        pk, mirrored, updated_at = found
        if updated_at <= listed_at and mirrored != values:
            to_update.append(KubePod(pk=pk, cluster=cluster, uid=pod.uid, updated_at=now, **data))
    KubePod.objects.bulk_create(to_create, batch_size=BATCH)
    if to_update:
        KubePod.objects.bulk_update(to_update, [*POD_FIELDS, "updated_at"], batch_size=BATCH)
    gone = [pk for pk, _, updated_at in existing.values() if updated_at <= listed_at]
    if not listing.complete:
        gone = []
    _delete(KubePod, gone)
    return len(to_create) + len(to_update) + len(gone)


def node_row_data(node: kube.Node) -> dict[str, Any]:
    """What a node's row mirrors of it (its name aside), by listing or by watch event."""
    return {
        "uid": node.uid,
        "provider_id": node.provider_id,
        "labels": dict(node.labels),
        "gpu_capacity": node.gpu_capacity,
        "gpu_allocatable": node.gpu_allocatable,
        "ready": node.ready,
        "kubelet_version": node.kubelet_version,
        "unschedulable": node.unschedulable,
    }


def pod_row_values(pod: kube.Pod) -> tuple[Any, ...]:
    """What a pod's row mirrors of it (its uid aside), in the order of POD_FIELDS."""
    return (
        pod.namespace,
        pod.name,
        pod.node_name,
        pod.phase,
        pod.gpu_requests,
        pod.sriov_network,
        pod.gpu_type,
        pod.daemon,
        dict(pod.labels),
    )


def _delete(model: type[KubeNode] | type[KubePod], pks: Sequence[int]) -> None:
    for chunk in _chunks(pks):
        model.objects.filter(pk__in=chunk).delete()


def _chunks(items: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]
