"""One watch event on the mirror: the one node or pod row it names, created, updated or
deleted, by the rules of kube.observe (what a row mirrors: `node_row_data`,
`pod_row_values`; a node of the same name with another uid is a replacement).

An event is newer than anything mirrored of its object by its stream (events come in
order, after the listing the stream started from), so it is written as it is; a row is
written only when a mirrored field differs. A DELETED event deletes the row: the caller
(kube.watch) applies events only from a watch unbroken since a complete listing.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction

from capvco_web.integrations import kube
from capvco_web.rows import fields_assign
from clusters.models import Cluster
from kube.models import KubeNode, KubePod, KubeWatch
from kube.observe import POD_FIELDS, node_row_data, pod_row_values

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def node_event_apply(*, cluster: Cluster, event: kube.WatchEvent[kube.Node], now: datetime) -> int:
    """Answers the rows written (0 or 1)."""
    node = event.object
    if node is None:
        return 0  # a bookmark
    if event.type == DELETED:
        deleted, _ = KubeNode.objects.filter(cluster=cluster, name=node.name, uid=node.uid).delete()
        return min(deleted, 1)
    data = node_row_data(node)
    row = KubeNode.objects.filter(cluster=cluster, name=node.name).first()
    if row is None:
        try:
            with transaction.atomic():
                KubeNode.objects.create(
                    cluster=cluster, name=node.name, first_seen_at=now, updated_at=now, **data
                )
            return 1
        except IntegrityError:  # the beat pass made it meanwhile (it lists while the
            row = KubeNode.objects.get(cluster=cluster, name=node.name)  # stamp is stale)
    if row.uid != node.uid:  # another node of the same name: a replacement
        data["first_seen_at"] = now
    changed = fields_assign(row, data)
    if not changed:
        return 0
    row.updated_at = now
    row.save(update_fields=[*changed, "updated_at"])
    return 1


def pod_event_apply(*, cluster: Cluster, event: kube.WatchEvent[kube.Pod], now: datetime) -> int:
    """Answers the rows written (0 or 1)."""
    pod = event.object
    if pod is None:
        return 0
    if event.type == DELETED:
        deleted, _ = KubePod.objects.filter(cluster=cluster, uid=pod.uid).delete()
        return min(deleted, 1)
    values = pod_row_values(pod)
    data = dict(zip(POD_FIELDS, values, strict=True))
    mirrored = KubePod.objects.filter(cluster=cluster, uid=pod.uid).values_list(*POD_FIELDS).first()
    if mirrored is None:
        try:
            with transaction.atomic():
                KubePod.objects.create(
                    cluster=cluster, uid=pod.uid, first_seen_at=now, updated_at=now, **data
                )
            return 1
        except IntegrityError:  # made by the beat pass meanwhile: compared below
            mirrored = ()
    if tuple(mirrored) == values:
        return 0
    return KubePod.objects.filter(cluster=cluster, uid=pod.uid).update(updated_at=now, **data)


def kube_watch_stamp(*, cluster_id: int, kind: str, at: datetime) -> None:
    """The cluster's `kind` is whole and current as of `at` (KubeWatch)."""
    KubeWatch.objects.update_or_create(
        cluster_id=cluster_id, kind=kind, defaults={"watched_at": at}
    )


def kube_watch_unstamp(*, cluster_id: int, kind: str, stamped: datetime) -> None:
    """The watch of the cluster's `kind` stopped: its stamp is cleared, so that the beat
    pass lists it again at once; unless another watch of it stamped since (`stamped` is
    the last stamp this one wrote)."""
    KubeWatch.objects.filter(cluster_id=cluster_id, kind=kind, watched_at=stamped).update(
        watched_at=None
    )
