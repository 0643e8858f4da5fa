"""The SR-IOV reclaim pass, sent by beat (SRIOV_RECLAIM_INTERVAL_SECONDS): one task per
cluster whose SR-IOV is enabled or still has NICs."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db.models import Q

from capvco_web.locks import object_lock
from capvco_web.tasks import send_on_commit
from clusters.models import Cluster
from sriov.models import PodNic
from sriov.reclaim import cluster_nics_reclaim

logger = logging.getLogger(__name__)


@shared_task
def sriov_reclaim_all() -> None:
    live = PodNic.objects.exclude(state=PodNic.State.RELEASED).values("cluster_id")
    clusters = Cluster.objects.filter(Q(sriov__enabled=True) | Q(pk__in=live)).exclude(
        sriov__credential=""
    )
    for cluster_id in clusters.values_list("pk", flat=True).distinct():
        send_on_commit(sriov_reclaim_cluster, cluster_id)


@shared_task
def sriov_reclaim_cluster(cluster_id: int) -> None:
    cluster = Cluster.objects.select_related("account").filter(pk=cluster_id).first()
    if cluster is None:
        return
    with object_lock(f"sriov-reclaim:{cluster_id}") as taken:
        if not taken:
            return
        result = cluster_nics_reclaim(cluster=cluster)
    for name in result.released:
        logger.info("sriov reclaim %s: released %s", cluster.name, name)
    for name in result.leaks_detached:
        logger.info("sriov reclaim %s: detached leaked NIC %s", cluster.name, name)
