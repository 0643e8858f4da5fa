"""The SR-IOV reclaim pass, sent by beat (SRIOV_RECLAIM_INTERVAL_SECONDS): one task per
cluster whose SR-IOV is enabled or still has NICs, or whose SR-IOV credential is imported
(read first, then reclaimed)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db.models import Q

from capvco_web.locks import object_lock
from capvco_web.tasks import send_on_commit
from clusters.models import Cluster
from sriov.capi_credential import imported_credential_sync
from sriov.models import PodNic
from sriov.reclaim import cluster_nics_reclaim

logger = logging.getLogger(__name__)


@shared_task
def sriov_reclaim_all() -> None:
    live = PodNic.objects.exclude(state=PodNic.State.RELEASED).values("cluster_id")
    with_nics = Cluster.objects.filter(Q(sriov__enabled=True) | Q(pk__in=live)).exclude(
        sriov__credential=""
    )
    # Imported clusters whose SR-IOV credential is read from the Cluster API's Secret.
    imported = Cluster.objects.exclude(imported_from="").filter(pools__capi_sriov_secret_ref__gt="")
    found = set(with_nics.values_list("pk", flat=True)) | set(imported.values_list("pk", flat=True))
    for cluster_id in sorted(found):
        send_on_commit(sriov_reclaim_cluster, cluster_id)


@shared_task
def sriov_reclaim_cluster(cluster_id: int) -> None:
    cluster = Cluster.objects.select_related("account").filter(pk=cluster_id).first()
    if cluster is None:
        return
    with object_lock(f"sriov-reclaim:{cluster_id}") as taken:
        if not taken:
            return
        imported_credential_sync(cluster=cluster)
        result = cluster_nics_reclaim(cluster=cluster)
    for name in result.released:
        logger.info("sriov reclaim %s: released %s", cluster.name, name)
    for name in result.leaks_detached:
        logger.info("sriov reclaim %s: detached leaked NIC %s", cluster.name, name)
