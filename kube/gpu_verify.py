"""Each GPU node verified by a pod that uses its GPUs: what the node's pods can use, held
against what whitesky bills for its machine (docs/guides/gpu.md, "What is verified and
how").

When a node of a GPU pool first advertises `nvidia.com/gpu` (per incarnation: its uid),
and again when a person asks (`GpuVerifyRequest`), the cluster's plan (`kube.plan`) makes
a Job in GPU_VERIFY_NAMESPACE, pinned to the node by `nodeName`, holding all its GPUs,
running NVIDIA's `nvidia-smi` query (`gpus.probe.COMMAND`). The verification row is recorded
before its Job is made, the Job's name its key. Observe lists the namespace's Jobs and their
pods (this module's mirror, `GpuVerifyJob`); once the pod finished, act reads its log
(`pods/log`), judges it (`gpus.probe.judge`: the count against the machine's attached
vGPUs, each model against the pool's type, the driver against the pool's
`driverVersion`) and records `verified` or `mismatch`; a pod that did not run (no
driver, image not pulled, never scheduled in time, no GPU free) is `failed` with its own
reason. Then the Job goes. A Job of ours that no unfinished verification names is deleted:
a worker killed between making a Job and reading it ends with one verdict and no Job
left, whichever pass finds it. All from complete listings begun after the verification
was recorded.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from capvco_web.counters import count
from capvco_web.integrations import kube
from capvco_web.rows import fields_assign, model_update
from clusters.models import Cluster
from gpus.probe import COMMAND, GpuSeen, ProbeError, judge, parse_query
from kube.models import GpuVerification, GpuVerifyJob

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

logger = logging.getLogger(__name__)

MANAGED_BY_LABEL, MANAGED_BY = "app.kubernetes.io/managed-by", "capvco-web"
COMPONENT_LABEL, COMPONENT = "app.kubernetes.io/component", "gpu-verify"
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}={COMPONENT}"
NODE_UID_LABEL = "capvco.io/gpu-verify-node-uid"
JOB_LABEL = "capvco.io/gpu-verify-job"
VERIFIED_LABEL = "capvco.io/gpu-verified"
PROBE_CONTAINER = "probe"
# nvidia-smi prints a line per GPU: 8 GPUs are well under this; more is not its output.
LOG_LIMIT_BYTES = 64 * 1024
Status = GpuVerification.Status


def job_name(node_uid: str, attempt: int) -> str:
    """The Job of a node incarnation's `attempt`th verification: a DNS label (63 at most)."""
    return f"gpu-verify-{kube.gpu_label_value(node_uid)[:40]}-{attempt}"


def job_manifest(*, name: str, node: str, node_uid: str, gpus: int) -> dict[str, Any]:
    """The Job: one pod on `node` (nodeName: no scheduler, so no node selector or affinity
    can keep it off), holding all the node's `gpus`, never retried (a retry would only
    hide what failed), ended by the API server after GPU_VERIFY_TIMEOUT_SECONDS."""
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: COMPONENT,
        NODE_UID_LABEL: node_uid,
        JOB_LABEL: name,
    }
    limits = {"limits": {kube.GPU_RESOURCE: str(gpus)}}
    probe = {
        "name": PROBE_CONTAINER,
        "image": settings.GPU_VERIFY_IMAGE,
        "command": shlex.split(COMMAND),
        "resources": limits,
    }
    # The CUDA sample runs after nvidia-smi, on the same GPUs (an init container's GPUs are
    # the pod's): nvidia-smi's log is read whatever the sample does.
    if settings.GPU_VERIFY_CUDA_IMAGE:
        spec: dict[str, Any] = {
            "initContainers": [probe],
            "containers": [
                {"name": "cuda", "image": settings.GPU_VERIFY_CUDA_IMAGE, "resources": limits}
            ],
        }
    else:
        spec = {"containers": [probe]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": settings.GPU_VERIFY_NAMESPACE, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.GPU_VERIFY_TIMEOUT_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    # Whatever the node is tainted with (GPU nodes often are): it is the
                    # node that is verified, so its pods' view is what counts.
                    "tolerations": [{"operator": "Exists"}],
                    **spec,
                },
            },
        },
    }


def gpu_verify_wanted(cluster: Cluster) -> bool:
    """Whether the cluster's verification Jobs are listed and planned: the setting on, and
    a GPU pool in the cluster (or Jobs of ours still mirrored, to be cleaned up)."""
    if not settings.GPU_VERIFY:
        return False
    return (
        cluster.pools.filter(gpu_count__gt=0).exists()
        or GpuVerifyJob.objects.filter(cluster=cluster).exists()
    )


@dataclass(frozen=True)
class VerifyJobsListing:
    jobs: kube.Listing[kube.Job]
    pods: kube.Listing[kube.PodRun]

    @property
    def complete(self) -> bool:
        return self.jobs.complete and self.pods.complete


def verify_jobs_list(client: KubeClient) -> VerifyJobsListing:
    """The verification namespace's Jobs of ours, and their pods."""
    namespace = settings.GPU_VERIFY_NAMESPACE
    return VerifyJobsListing(
        client.list_jobs(namespace=namespace, label_selector=SELECTOR),
        client.list_pod_runs(namespace=namespace, label_selector=SELECTOR),
    )


def verify_jobs_sync(*, cluster: Cluster, listing: VerifyJobsListing, now: datetime) -> int:
    """Mirror the listed Jobs, each with its pod; from a complete listing, drop the rows it
    no longer shows. Answers the rows written."""
    runs: dict[str, kube.PodRun] = {}
    for pod in listing.pods.items:
        name = pod.labels.get(JOB_LABEL, "")
        held = runs.get(name)
        # backoffLimit 0 makes one pod; should there be two, the one that ended says more.
        if held is None or (held.phase not in FINISHED and pod.phase in FINISHED):
            runs[name] = pod
    existing = {row.name: row for row in GpuVerifyJob.objects.filter(cluster=cluster)}
    writes = 0
    for job in listing.jobs.items:
        run = runs.get(job.name)
        data = {
            "node_uid": job.labels.get(NODE_UID_LABEL, ""),
            "finished": job.finished,
            "reason": job.reason[:200],
            "message": job.message,
            "pod_name": run.name if run else "",
            "pod_phase": run.phase if run else "",
            "pod_reason": run.reason[:200] if run else "",
            "pod_message": run.message if run else "",
        }
        row = existing.pop(job.name, None)
        if row is None:
            GpuVerifyJob.objects.create(cluster=cluster, name=job.name, updated_at=now, **data)
            writes += 1
        elif fields_assign(row, data):
            row.updated_at = now
            row.save()
            writes += 1
    if listing.complete and existing:
        GpuVerifyJob.objects.filter(pk__in=[row.pk for row in existing.values()]).delete()
        writes += len(existing)
    return writes


FINISHED = ("Succeeded", "Failed")


def verified_uids(cluster: Cluster, uids: Iterable[str]) -> set[str]:
    """The node incarnations among `uids` whose latest verification is `verified`."""
    latest: dict[str, str] = {}
    for uid, status in (
        GpuVerification.objects.filter(cluster=cluster, node_uid__in=list(uids))
        .order_by("started_at", "pk")
        .values_list("node_uid", "status")
    ):
        latest[uid] = status
    return {uid for uid, status in latest.items() if status == Status.VERIFIED}


def gpus_seen(seen: Iterable[GpuSeen]) -> list[dict[str, Any]]:
    """What is kept of each GPU a verification saw."""
    return [
        {
            "index": gpu.index,
            "model": gpu.name,
            "memory_mib": gpu.memory_mib,
            "driver": gpu.driver_version,
            "uuid": gpu.uuid,
            "pci_bus_id": gpu.pci_bus_id,
            "mig_mode": gpu.mig_mode,
            "compute_cap": gpu.compute_cap,
        }
        for gpu in seen
    ]


@dataclass(frozen=True)
class VerifyVerdict:
    status: GpuVerification.Status
    reasons: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)


def verdict_of_log(log: str, *, count: int, gpu_type: str, driver: str) -> VerifyVerdict:
    """The verdict on what nvidia-smi printed in a pod holding all the node's GPUs, against
    what the machine is billed for: `count` x `gpu_type`, with at least `driver`."""
    try:
        seen = parse_query(log)
    except ProbeError as exc:
        return VerifyVerdict(Status.FAILED, [f"nvidia-smi's output cannot be read: {exc}"])
    verdict = judge(seen, gpu_type, count, driver)
    return VerifyVerdict(Status(verdict.status), list(verdict.reasons), gpus_seen(seen))


def verdict_failed(outcome: str, reason: str, message: str) -> VerifyVerdict:
    """The pod did not run to the end: its own reason and message (the kubelet's, the
    scheduler's, a container's), or that it did not finish in time."""
    said = ": ".join(part for part in (reason, message) if part) or "no reason given"
    if outcome == "gone":
        return VerifyVerdict(
            Status.FAILED, ["the node left the cluster, or its GPU pool, before it was verified"]
        )
    if outcome == "timeout":
        seconds = settings.GPU_VERIFY_TIMEOUT_SECONDS
        return VerifyVerdict(Status.FAILED, [f"the pod did not finish within {seconds} s ({said})"])
    return VerifyVerdict(Status.FAILED, [f"the pod did not run: {said}"[:1000]])


def verification_record(
    *, cluster_id: int, node: str, node_uid: str, job_name: str, request_id: int | None
) -> GpuVerification | None:
    """Record a verification before its Job is made; None when one of the node incarnation
    is unfinished already, or the request was answered (another pass's)."""
    try:
        with transaction.atomic():
            return GpuVerification.objects.create(
                cluster_id=cluster_id,
                node_name=node,
                node_uid=node_uid,
                request_id=request_id,
                job_name=job_name,
                started_at=timezone.now(),
            )
    except IntegrityError:
        return None


def verification_restart(pk: int) -> GpuVerification | None:
    """Take an unfinished verification whose Job no listing shows, to make it again: its
    start moves to now, so that only a listing begun after it judges it."""
    verification = GpuVerification.objects.filter(
        pk=pk, status__in=GpuVerification.UNFINISHED
    ).first()
    if verification is None or not model_update(
        verification, {"started_at": timezone.now()}, expect={"status": verification.status}
    ):
        return None
    return verification


def verification_running(verification: GpuVerification) -> None:
    """Its Job was made (or found made)."""
    model_update(verification, {"status": Status.RUNNING}, expect={"status": Status.PENDING})


def verdict_record(verification: GpuVerification, verdict: VerifyVerdict) -> bool:
    """Record the verdict, while the verification is still unfinished (compare-and-set)."""
    written = model_update(
        verification,
        {
            "status": verdict.status,
            "reasons": verdict.reasons,
            "gpus": verdict.gpus,
            "finished_at": timezone.now(),
        },
        expect={"status__in": GpuVerification.UNFINISHED},
    )
    if written:
        count("gpu_verifications", verdict.status)
        log = logger.info if verdict.status == Status.VERIFIED else logger.warning
        log(
            "GPU verification of node %s of %s: %s %s",
            verification.node_name,
            verification.cluster_id,
            verdict.status,
            "; ".join(verdict.reasons),
        )
    return written


def verifications_superseded(before: datetime) -> QuerySet[GpuVerification]:
    """History: verifications finished before `before` that a newer one of the same node
    replaced. A node's newest is its verdict, kept however old."""
    newer = GpuVerification.objects.filter(
        cluster=OuterRef("cluster"), node_name=OuterRef("node_name"), pk__gt=OuterRef("pk")
    )
    return GpuVerification.objects.filter(finished_at__lt=before).filter(Exists(newer))


def verifications_history_prune(*, before: datetime, batch: int = 5000) -> int:
    """Delete the superseded verifications finished before `before`, in batches (no long
    lock on the table). Answers how many."""
    deleted = 0
    while ids := list(verifications_superseded(before).values_list("pk", flat=True)[:batch]):
        deleted += GpuVerification.objects.filter(pk__in=ids).delete()[0]
    return deleted
