"""The SR-IOV tasks.

* The reclaim pass, sent by beat (SRIOV_RECLAIM_INTERVAL_SECONDS): one task per cluster
  whose SR-IOV is enabled or still has NICs, or whose SR-IOV credential is imported (read
  first, then reclaimed).
* A VM's queue of NIC attaches and detaches, sent when an ADD, a DEL or a GC queues one,
  run by one worker per VM at a time; beat (SRIOV_QUEUE_RESUME_INTERVAL_SECONDS) sends it
  again for every VM whose queue is not empty, so a queue whose runner was killed
  mid-attach goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from django.db.models import Q

from capvco_web.backoff import backoff_seconds
from capvco_web.locks import object_lock
from capvco_web.tasks import send_on_commit
from clusters.models import Cluster
from sriov.agent import queued, vm_queues_run
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


QUEUE_RETRIES = 6  # 1 + 2 + ... + 32 s; past that, beat's resume goes on


@shared_task(bind=True, max_retries=QUEUE_RETRIES)
def sriov_vm_queue_run(self: Task[Any, Any], location_id: int, vm_id: int) -> None:
    """The VM's queue, and beside it the location's other waiting queues (vm_queues_run)."""
    results = vm_queues_run(location_id=location_id, vm_id=vm_id)
    for vm, result in results.items():
        for row in result.failed:
            logger.info("sriov queue of VM %s: %s failed: %s", vm, row, row.failure)
        for row in result.detached:
            logger.info("sriov queue of VM %s: released %s", vm, row)
        if vm != vm_id and result.again:  # the VM's own task, as this one's first retry
            again = backoff_seconds(0, base=1.0)
            sriov_vm_queue_run.apply_async((location_id, vm), countdown=again)
    if results[vm_id].again and self.request.retries < QUEUE_RETRIES:
        # No call slot of the account was free, the reclaimer's detach holds the VM's turn,
        # or an attach's outcome is not known.
        raise self.retry(countdown=backoff_seconds(self.request.retries, base=1.0))


@shared_task
def sriov_vm_queues_resume() -> None:
    waiting = PodNic.objects.filter(queued())
    for location_id, vm_id in sorted(set(waiting.values_list("location_id", "vm_id"))):
        send_on_commit(sriov_vm_queue_run, location_id, vm_id)
