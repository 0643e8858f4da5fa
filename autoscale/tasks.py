"""The autoscaler's loop: beat sends `autoscale_all` (AUTOSCALE_INTERVAL), which sends one
task per cluster with a pool that autoscales; each holds the cluster's autoscale lock."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from autoscale.reconcile import autoscale_reconcile
from capvco_web.tasks import send_on_commit
from clusters.models import Cluster
from kube.client import kube_client


def autoscaled_clusters() -> list[int]:
    return list(
        Cluster.objects.filter(state=Cluster.State.ACTIVE, pools__autoscale_enabled=True)
        .distinct()
        .order_by("pk")
        .values_list("pk", flat=True)
    )


@shared_task
def autoscale_all() -> None:
    expires = settings.AUTOSCALE_INTERVAL.total_seconds()
    for cluster_id in autoscaled_clusters():
        send_on_commit(autoscale_cluster, cluster_id, expires=expires)


@shared_task
def autoscale_cluster(cluster_id: int) -> None:
    cluster = Cluster.objects.filter(pk=cluster_id, state=Cluster.State.ACTIVE).first()
    if cluster is None:
        return  # deleted or being deleted since the fan-out
    autoscale_reconcile(cluster=cluster, kube_client=kube_client)
