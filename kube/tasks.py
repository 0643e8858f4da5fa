"""The Kubernetes loop of each observed cluster: mirror its nodes and pods, then carry out
the plan of what the control plane writes there (node labels, the GPU add-on).

Beat sends `observe_kube_all` (see settings); it sends one task per cluster, which takes
the cluster's id and holds the cluster's observe lock."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from capvco_web.integrations.kube import KubeconfigInvalid
from capvco_web.locks import object_lock
from capvco_web.tasks import send_on_commit
from clusters.selectors import kube_observe_lock, kube_observed
from kube.client import kube_client
from kube.gpu_addon import cluster_gpu_addon_observe
from kube.gpu_use import cluster_gpu_use_observe, gpu_use_due
from kube.observe import cluster_kube_observe, observation_record
from kube.plan import kube_plan, kube_steps_act
from kube.services import cluster_mirror_forget, kube_unobserved_with_mirror

logger = logging.getLogger(__name__)


@shared_task
def observe_kube_all() -> None:
    """Each observed cluster its own task; the mirror of a cluster whose kubeconfig was
    removed is dropped here. Dropped when they waited an interval: the next tick sends
    them again."""
    expires = settings.OBSERVE_INTERVAL.total_seconds()
    for cluster_id in kube_observed().values_list("pk", flat=True):
        send_on_commit(observe_cluster_kube, cluster_id, expires=expires)
    for cluster in kube_unobserved_with_mirror():
        cluster_mirror_forget(cluster=cluster)


# The name it had in clusters.tasks: messages already queued by a worker of the last
# release still find it.
@shared_task(name="clusters.tasks.observe_cluster_kube")
def observe_cluster_kube(cluster_id: int) -> None:
    """Mirror the cluster's nodes and pods; flag machines and nodes without each other and
    GPU nodes that advertise no GPU, read the GPU add-on's DaemonSet and, when due, what its
    GPUs do (kube.gpu_use); then carry out
    the plan of what the control plane writes there (kube.plan): the GPU labels of its
    nodes and the GPU add-on."""
    with object_lock(kube_observe_lock(cluster_id)) as taken:
        if not taken:
            return
        # Read under the lock: the cluster's rows are deleted only under it, so they stay
        # until this pass ends, however long its calls take.
        cluster = (
            kube_observed()
            .select_related("kube_observation", "gpu_addon_state", "gpu_use_state")
            .filter(pk=cluster_id)
            .first()
        )
        if cluster is None:
            return  # deleted, deleting, or its kubeconfig removed since the fan-out
        try:
            client = kube_client(cluster)
        except KubeconfigInvalid as exc:
            observation_record(cluster, {"complete": False, "error": str(exc)})
            logger.warning("observe kubernetes of %s: %s", cluster.name, exc)
            return
        with client:
            cluster_kube_observe(client=client, cluster=cluster)
            cluster_gpu_addon_observe(client=client, cluster=cluster)
            if gpu_use_due(cluster, now=(now := timezone.now())):
                cluster_gpu_use_observe(client=client, cluster=cluster, now=now)
            kube_steps_act(client=client, steps=kube_plan(cluster), cluster_id=cluster.pk)
