"""What the control plane writes in a workload cluster, as steps of the cluster's plan: the
GPU labels of its nodes (`kube.gpu_nodes`), the GPU add-on (`kube.gpu_addon`) and the Jobs
that verify its GPU nodes (`kube.gpu_verify`).

`kube_plan` reads the database only, what observe mirrored: the nodes' labels from the
last node listing (only when the cluster's last observation was complete: a partial one
may lack the labels a node has), the machines' attached vGPUs, and the add-on's DaemonSet
as observe read it (its hash and resourceVersion). Each step names its object and carries
every value act sends; `kube_steps_act` sends exactly that, after checking by compare-
and-set that the row the step was planned from is still as the plan read it. A step whose
row changed is dropped: the next pass plans again. The dry run (`GET
/api/v1/clusters/{id}/plan/`) lists them."""

from __future__ import annotations

import logging
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from capvco_web.counters import count
from capvco_web.integrations import kube
from capvco_web.plans import Call, PlanStep, StepDropped, plan_apply
from clusters.models import Cluster
from gpus.models import VgpuReservation
from kube.gpu_addon import (
    ADDON_NAME,
    ADDON_NAMESPACE,
    addon_applied_record,
    addon_failed_record,
    addon_manifest,
    addon_removed_record,
    addon_state,
    addon_unjudged,
)
from kube.gpu_nodes import GPU_COUNT_LABEL, GPU_TYPE_LABEL, attached_gpus, gpus_by, machine_gpus
from kube.gpu_verify import (
    LOG_LIMIT_BYTES,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PROBE_CONTAINER,
    VERIFIED_LABEL,
    gpu_verify_wanted,
    job_manifest,
    job_name,
    verdict_failed,
    verdict_of_log,
    verdict_record,
    verification_record,
    verification_restart,
    verification_running,
    verified_uids,
)
from kube.models import GpuVerification, GpuVerifyJob, GpuVerifyRequest, KubeNode
from kube.selectors import cluster_observation

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

logger = logging.getLogger(__name__)

NODE_LABELS = "node_labels"
ADDON_APPLY = "gpu_addon_apply"
ADDON_REMOVE = "gpu_addon_remove"
VERIFY_START = "gpu_verify_start"
VERIFY_READ = "gpu_verify_read"
VERIFY_JOB_DELETE = "gpu_verify_job_delete"
KINDS = (NODE_LABELS, ADDON_APPLY, ADDON_REMOVE, VERIFY_START, VERIFY_READ, VERIFY_JOB_DELETE)
GPU_LABELS = (GPU_TYPE_LABEL, GPU_COUNT_LABEL, VERIFIED_LABEL)
DAEMONSETS = f"/apis/apps/v1/namespaces/{ADDON_NAMESPACE}/daemonsets"


@dataclass(frozen=True)
class NodeLabelsPatch:
    """Set these GPU labels on the node and remove those that no longer apply (its machine
    has no vGPU attached any more), in one merge patch; its other labels are left alone."""

    cluster_id: int
    node_id: int
    """The mirrored node row the labels were compared with."""
    node: str
    labels: tuple[tuple[str, str], ...]
    removed: tuple[str, ...]
    seen_at: datetime
    """The row's `updated_at` as planned: act patches only while it still holds."""
    reason: str

    @property
    def kind(self) -> str:
        return NODE_LABELS

    @property
    def target(self) -> str:
        return f"node {self.node}"

    def describe(self) -> str:
        changes = [f"{key}={value}" for key, value in self.labels]
        changes += [f"remove {key}" for key in self.removed]
        return f"label {self.target}: {', '.join(changes)} ({self.reason})"

    def calls(self) -> tuple[Call, ...]:
        return (Call("PATCH", f"/api/v1/nodes/{self.node}", service="kubernetes"),)

    @property
    def patch(self) -> dict[str, str | None]:
        """The labels of the merge patch: None removes one."""
        return {**dict.fromkeys(self.removed), **dict(self.labels)}


@dataclass(frozen=True)
class AddonApply:
    """Create the add-on's DaemonSet, or replace ours whole, with the manifest of `digest`."""

    cluster_id: int
    verb: Literal["create", "replace"]
    digest: str
    image: str
    seen_hash: str
    """The hash the cluster's row held as planned (empty: none of ours)."""
    resource_version: str
    """replace: ours as observe read it; the API server refuses the replace (409 Conflict)
    when it changed since."""
    reason: str

    @property
    def kind(self) -> str:
        return ADDON_APPLY

    @property
    def target(self) -> str:
        return f"daemonset {ADDON_NAMESPACE}/{ADDON_NAME}"

    def describe(self) -> str:
        what = f"{self.image}, sha256 {self.digest[:12]}"
        if self.verb == "replace":
            what += f", from resourceVersion {self.resource_version}"
        return f"{self.verb} {self.target} ({what}): {self.reason}"

    def calls(self) -> tuple[Call, ...]:
        if self.verb == "create":
            return (Call("POST", DAEMONSETS, service="kubernetes"),)
        return (Call("PUT", f"{DAEMONSETS}/{ADDON_NAME}", service="kubernetes"),)


@dataclass(frozen=True)
class AddonRemove:
    """Delete our DaemonSet of the add-on."""

    cluster_id: int
    seen_hash: str
    reason: str

    @property
    def kind(self) -> str:
        return ADDON_REMOVE

    @property
    def target(self) -> str:
        return f"daemonset {ADDON_NAMESPACE}/{ADDON_NAME}"

    def describe(self) -> str:
        return f"delete {self.target}: {self.reason}"

    def calls(self) -> tuple[Call, ...]:
        return (Call("DELETE", f"{DAEMONSETS}/{ADDON_NAME}", service="kubernetes"),)


def _jobs_path() -> str:
    return f"/apis/batch/v1/namespaces/{settings.GPU_VERIFY_NAMESPACE}/jobs"


@dataclass(frozen=True)
class GpuVerifyStart:
    """Record a verification of the node incarnation (or take the one recorded whose Job
    no listing shows), then make its namespace if missing and its Job."""

    cluster_id: int
    node_id: int
    node: str
    node_uid: str
    job_name: str
    gpus: int
    """All the node's allocatable nvidia.com/gpu: the Job's pod holds every one."""
    verification_id: int | None
    """A verification recorded whose Job is not in the cluster: made again, same name."""
    request_id: int | None
    reason: str

    @property
    def kind(self) -> str:
        return VERIFY_START

    @property
    def target(self) -> str:
        return f"node {self.node}"

    def describe(self) -> str:
        return f"verify the GPUs of {self.target} with job {self.job_name} ({self.reason})"

    def calls(self) -> tuple[Call, ...]:
        return (
            Call("POST", "/api/v1/namespaces", service="kubernetes", maybe=True),
            Call("POST", _jobs_path(), service="kubernetes"),
        )


@dataclass(frozen=True)
class GpuVerifyRead:
    """Judge a verification from its Job's finished pod (its log when it succeeded), then
    delete the Job."""

    cluster_id: int
    verification_id: int
    node: str
    job_name: str
    pod_name: str
    outcome: Literal["succeeded", "failed", "timeout", "gone"]
    pod_reason: str
    pod_message: str
    count: int
    """What the machine is billed for: its attached vGPUs, of the pool's type."""
    gpu_type: str
    driver: str
    """The pool's driverVersion ("": any driver)."""
    reason: str

    @property
    def kind(self) -> str:
        return VERIFY_READ

    @property
    def target(self) -> str:
        return f"node {self.node}"

    def describe(self) -> str:
        billed = f"{self.count} x {self.gpu_type}" + (
            f", driver {self.driver}+" if self.driver else ""
        )
        return f"judge job {self.job_name} of {self.target} against {billed}: {self.reason}"

    def calls(self) -> tuple[Call, ...]:
        return (Call("DELETE", f"{_jobs_path()}/{self.job_name}", service="kubernetes"),)


@dataclass(frozen=True)
class GpuVerifyJobDelete:
    """Delete a verification Job of ours that no unfinished verification names."""

    cluster_id: int
    job_id: int
    job_name: str
    reason: str

    @property
    def kind(self) -> str:
        return VERIFY_JOB_DELETE

    @property
    def target(self) -> str:
        return f"job {settings.GPU_VERIFY_NAMESPACE}/{self.job_name}"

    def describe(self) -> str:
        return f"delete {self.target}: {self.reason}"

    def calls(self) -> tuple[Call, ...]:
        return (Call("DELETE", f"{_jobs_path()}/{self.job_name}", service="kubernetes"),)


VerifyStep = GpuVerifyStart | GpuVerifyRead | GpuVerifyJobDelete
KubeStep = NodeLabelsPatch | AddonApply | AddonRemove | VerifyStep


def kube_plan(cluster: Cluster) -> list[KubeStep]:
    """The Kubernetes writes the next pass makes for the cluster, from the database only."""
    if cluster.state != Cluster.State.ACTIVE or not cluster.kubeconfig:
        return []  # its Kubernetes is not observed (clusters.selectors.kube_observed)
    return [*node_labels_plan(cluster), *addon_plan(cluster), *gpu_verify_plan(cluster)]


def node_labels_plan(cluster: Cluster) -> list[NodeLabelsPatch]:
    if not cluster_observation(cluster).complete:
        return []
    # The cluster's nodes whose machine has vGPUs attached, a row per node and vGPU, with
    # the vGPU's card: one query.
    node = "machine__kube_nodes__"
    rows = list(
        attached_gpus(
            cluster,
            *(f"{node}{name}" for name in ("id", "name", "labels", "updated_at", "uid")),
            machine__kube_nodes__cluster=cluster,
        ).order_by(f"{node}name", f"{node}id")
    )
    gpus = gpus_by((pk, vendor, model) for pk, _, _, _, _, vendor, model in rows)
    nodes = {pk: (name, labels, seen_at, uid) for pk, name, labels, seen_at, uid, _, _ in rows}
    verified = verified_uids(cluster, (uid for _, _, _, uid in nodes.values()))
    steps = []
    for pk, (name, labels, seen_at, uid) in nodes.items():
        held = gpus.get(pk)
        if held is None:
            continue  # on a card not (or no longer) listed: its labels stay as they are
        wanted = held.labels
        if uid in verified:
            wanted[VERIFIED_LABEL] = "true"
        removed = () if uid in verified or VERIFIED_LABEL not in labels else (VERIFIED_LABEL,)
        if not removed and all(labels.get(key) == value for key, value in wanted.items()):
            continue
        why = f"its machine has {held.count} x {held.gpu_type} attached"
        if removed:
            why += "; its GPUs are not verified"
        elif uid in verified:
            why += ", verified"
        steps.append(
            NodeLabelsPatch(
                cluster_id=cluster.pk,
                node_id=pk,
                node=name,
                labels=tuple(sorted(wanted.items())),
                removed=removed,
                seen_at=seen_at,
                reason=why,
            )
        )
    # Nodes of the cluster's machines with no vGPU attached (any more) that still carry a
    # GPU label: one query.
    for pk, name, labels, seen_at in stale_gpu_label_nodes(cluster).values_list(
        "id", "name", "labels", "updated_at"
    ):
        steps.append(
            NodeLabelsPatch(
                cluster_id=cluster.pk,
                node_id=pk,
                node=name,
                labels=(),
                removed=tuple(key for key in GPU_LABELS if key in labels),
                seen_at=seen_at,
                reason="its machine has no vGPU attached",
            )
        )
    return sorted(steps, key=lambda step: (step.node, step.node_id))


def stale_gpu_label_nodes(cluster: Cluster) -> QuerySet[KubeNode]:
    """The cluster's nodes of a machine that holds no attached vGPU, still carrying GPU
    labels: labels that no longer apply."""
    attached = VgpuReservation.objects.filter(
        machine=OuterRef("machine"), state=VgpuReservation.State.ATTACHED
    )
    return (
        KubeNode.objects.filter(cluster=cluster, machine__pool__cluster=cluster)
        .filter(labels__has_any_keys=list(GPU_LABELS))
        .exclude(Exists(attached))
    )


def addon_plan(cluster: Cluster) -> list[AddonApply | AddonRemove]:
    """From what observe read of the DaemonSet. Nothing while that read failed or found a
    DaemonSet that is not ours (its state's `error` says which); a write that failed is
    planned again."""
    if addon_unjudged(cluster):
        return []
    state = addon_state(cluster)
    held = state.hash
    if not cluster.gpu_addon:
        if not held:
            return []
        return [AddonRemove(cluster.pk, held, "the cluster's GPU add-on is off")]
    manifest, digest = addon_manifest()
    if held == digest:
        return []
    image = str(manifest["spec"]["template"]["spec"]["containers"][0]["image"])
    reason = "none of ours is in the cluster" if not held else "ours is of another manifest"
    verb: Literal["create", "replace"] = "replace" if held else "create"
    version = state.resource_version if held else ""
    return [AddonApply(cluster.pk, verb, digest, image, held, version, reason)]


@dataclass
class KubeActResult:
    applied: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    """Steps whose row changed since they were planned: the next pass plans again."""
    errors: list[str] = field(default_factory=list)


def kube_steps_act(
    *, client: KubeClient, steps: list[KubeStep], cluster_id: int | None = None
) -> KubeActResult:
    """Carry out exactly these steps through the one dispatcher, each only while the row
    it was planned from holds; with `cluster_id`, the pass is kept on the cluster's page."""

    def act(step: PlanStep) -> None:
        assert isinstance(step, NodeLabelsPatch | AddonApply | AddonRemove | VerifyStep)
        if not _act(client, step):
            raise StepDropped("its row changed since the plan")

    record = plan_apply(
        steps, act, scope="cluster", scope_id=cluster_id or 0, failures=(kube.KubeError,)
    )
    if steps and cluster_id is not None:
        record.save()
    result = KubeActResult()
    for step, outcome in zip(steps, record.outcomes, strict=True):
        if outcome.outcome == "failed":
            result.errors.append(f"{step.describe()}: {outcome.message}")
        else:
            (result.applied if outcome.outcome == "ran" else result.dropped).append(step.describe())
    for problem in result.errors:
        logger.warning("kubernetes: %s", problem)
    return result


def _act(client: KubeClient, step: KubeStep) -> bool:
    if isinstance(step, NodeLabelsPatch):
        return _labels_patch(client, step)
    if isinstance(step, GpuVerifyStart):
        return _verify_start(client, step)
    if isinstance(step, GpuVerifyRead):
        return _verify_read(client, step)
    if isinstance(step, GpuVerifyJobDelete):
        return _verify_job_delete(client, step)
    # The add-on as the plan saw it: wanted (or not), and the state it was planned from
    # (no row: none of ours recorded).
    held = Cluster.objects.filter(pk=step.cluster_id, gpu_addon=isinstance(step, AddonApply))
    seen = {"hash": step.seen_hash}
    if isinstance(step, AddonApply):
        seen["resource_version"] = step.resource_version
    recorded = Q(**{f"gpu_addon_state__{name}": value for name, value in seen.items()})
    if not any(seen.values()):
        recorded |= Q(gpu_addon_state__isnull=True)
    cluster = held.filter(recorded).select_related("gpu_addon_state").first()
    if cluster is None or addon_unjudged(cluster):
        return False
    if isinstance(step, AddonRemove):
        try:
            client.delete_daemonset(ADDON_NAMESPACE, ADDON_NAME)
        except kube.NotFound:
            pass  # gone already: what the step wanted
        except kube.KubeError as exc:
            addon_failed_record(cluster=cluster, error=f"GPU add-on: {exc}")
            raise
        addon_removed_record(cluster=cluster)
        return True
    manifest, digest = addon_manifest()
    if digest != step.digest:
        return False  # the manifest changed since the plan (a new image): plan again
    try:
        if step.verb == "create":
            answer = client.create_daemonset(ADDON_NAMESPACE, manifest)
        else:
            manifest["metadata"]["resourceVersion"] = step.resource_version
            answer = client.replace_daemonset(ADDON_NAMESPACE, ADDON_NAME, manifest)
    except kube.Conflict as exc:
        # Someone made or changed it since observe read it: the next pass reads it again
        # and plans from what is there, so nothing of theirs is overwritten unseen.
        count("kube_writes", "gpu_addon", "conflict")
        logger.info("GPU add-on of %s: %s; planned again", cluster.name, exc)
        return False
    except kube.KubeError as exc:
        addon_failed_record(cluster=cluster, error=f"GPU add-on: {exc}")
        raise
    addon_applied_record(
        cluster=cluster, digest=digest, created=step.verb == "create", answer=answer
    )
    return True


def _labels_patch(client: KubeClient, step: NodeLabelsPatch) -> bool:
    if not KubeNode.objects.filter(pk=step.node_id, updated_at=step.seen_at).exists():
        return False
    wanted = step.patch
    try:
        answer = client.patch_node_labels(step.node, wanted)
    except kube.KubeError:
        count("kube_writes", "node_labels", "error")
        raise
    count("kube_writes", "node_labels", "patched")
    logger.info("labelled node %s: %s", step.node, wanted)
    # The mirror takes the labels the patch answered: the next pass compares with them.
    KubeNode.objects.filter(pk=step.node_id, updated_at=step.seen_at).update(
        labels=dict(answer.labels), updated_at=timezone.now()
    )
    return True


def gpu_verify_plan(cluster: Cluster) -> list[VerifyStep]:
    """The verification Jobs to make, read and delete, from the mirror of the last
    complete listing of the namespace's Jobs (begun after every verification it judges
    was recorded) and of the last complete node listing."""
    observation = cluster_observation(cluster)
    listed_at = observation.gpu_verify_listed_at
    if not gpu_verify_wanted(cluster) or not observation.complete or listed_at is None:
        return []
    now = timezone.now()
    steps: list[VerifyStep] = []
    jobs = {job.name: job for job in GpuVerifyJob.objects.filter(cluster=cluster)}
    unfinished = {
        v.node_uid: v
        for v in GpuVerification.objects.filter(
            cluster=cluster, status__in=GpuVerification.UNFINISHED
        )
    }
    tried = Counter(
        GpuVerification.objects.filter(cluster=cluster).values_list("node_uid", flat=True)
    )
    asked = {
        r.node_uid: r
        for r in GpuVerifyRequest.objects.filter(cluster=cluster, verification__isnull=True)
    }
    billed = machine_gpus(cluster)
    nodes = list(
        KubeNode.objects.filter(
            cluster=cluster, machine__pool__cluster=cluster, machine__pool__gpu_count__gt=0
        )
        .select_related("machine__pool")
        .order_by("name", "pk")
    )
    for node in nodes:
        held = unfinished.get(node.uid)
        if held is not None:
            if held.job_name in jobs or held.started_at > listed_at:
                continue  # running, or made after the listing began: the next one shows it
            steps.append(_start(node, held.job_name, held.pk, None, "its job is not there"))
            continue
        if node.gpu_allocatable == 0:
            continue  # no GPU advertised (yet): gpus_missing says so after a while
        request = asked.get(node.uid)
        if node.uid in tried and request is None:
            continue  # this incarnation was verified (or tried) already
        name = job_name(node.uid, tried.get(node.uid, 0) + 1)
        why = (
            f"asked by {request.requested_by or 'someone'}: {request.reason}"
            if request
            else f"it advertises {node.gpu_allocatable} nvidia.com/gpu"
        )
        steps.append(_start(node, name, None, request.pk if request else None, why))
    by_job = {v.job_name: v for v in unfinished.values()}
    timeout = settings.GPU_VERIFY_TIMEOUT_SECONDS + 2 * settings.OBSERVE_INTERVAL.total_seconds()
    for name, job in sorted(jobs.items()):
        verification = by_job.get(name)
        if verification is None:
            steps.append(
                GpuVerifyJobDelete(cluster.pk, job.pk, name, "no unfinished verification names it")
            )
            continue
        node_row = next((n for n in nodes if n.uid == verification.node_uid), None)
        machine = node_row.machine if node_row is not None else None
        outcome: Literal["succeeded", "failed", "timeout", "gone"]
        if machine is None:
            outcome = "gone"  # nothing billed to hold it against any more
        elif job.pod_phase == "Succeeded":
            outcome = "succeeded"
        elif job.finished == "Failed" and job.reason == "DeadlineExceeded":
            outcome = "timeout"  # the API server ended it: activeDeadlineSeconds passed
        elif job.pod_phase == "Failed" or job.finished == "Failed":
            outcome = "failed"
        elif (now - verification.started_at).total_seconds() > timeout:
            outcome = "timeout"  # the API server should have ended it by now: it did not
        else:
            continue
        pool = machine.pool if machine is not None else None
        held_gpus = billed.get(machine.pk) if machine is not None else None
        steps.append(
            GpuVerifyRead(
                cluster_id=cluster.pk,
                verification_id=verification.pk,
                node=verification.node_name,
                job_name=name,
                pod_name=job.pod_name,
                outcome=outcome,
                pod_reason=job.pod_reason or job.reason,
                pod_message=job.pod_message or job.message,
                count=held_gpus.count if held_gpus else 0,
                gpu_type=pool.gpu_type if pool else "",
                driver=pool.gpu_driver_version if pool else "",
                reason=READ_REASONS[outcome],
            )
        )
    # A verification whose node went, and whose Job no listing begun after it shows: it
    # ends too (its Job, made or not, has nothing left to verify).
    uids = {node.uid for node in nodes}
    for verification in unfinished.values():
        if (
            verification.node_uid in uids
            or verification.job_name in jobs
            or verification.started_at > listed_at
        ):
            continue
        steps.append(
            GpuVerifyRead(
                cluster_id=cluster.pk,
                verification_id=verification.pk,
                node=verification.node_name,
                job_name=verification.job_name,
                pod_name="",
                outcome="gone",
                pod_reason="",
                pod_message="",
                count=0,
                gpu_type="",
                driver="",
                reason=READ_REASONS["gone"],
            )
        )
    return steps


READ_REASONS = {
    "succeeded": "its pod succeeded",
    "failed": "its pod failed",
    "timeout": "no pod finished in time",
    "gone": "the node is no longer a node of a GPU pool",
}


def _start(
    node: KubeNode, name: str, verification_id: int | None, request_id: int | None, why: str
) -> GpuVerifyStart:
    return GpuVerifyStart(
        cluster_id=node.cluster_id,
        node_id=node.pk,
        node=node.name,
        node_uid=node.uid,
        job_name=name,
        gpus=max(node.gpu_allocatable, 1),
        verification_id=verification_id,
        request_id=request_id,
        reason=why,
    )


def _verify_start(client: KubeClient, step: GpuVerifyStart) -> bool:
    """Record before acting: the row first (its Job's name the key), then the Job."""
    if step.verification_id is None:
        if not KubeNode.objects.filter(pk=step.node_id, uid=step.node_uid).exists():
            return False
        verification = verification_record(
            cluster_id=step.cluster_id,
            node=step.node,
            node_uid=step.node_uid,
            job_name=step.job_name,
            request_id=step.request_id,
        )
    else:
        verification = verification_restart(step.verification_id)
    if verification is None:
        return False  # another pass recorded it, or judged it meanwhile
    manifest = job_manifest(
        name=step.job_name, node=step.node, node_uid=step.node_uid, gpus=step.gpus
    )
    namespace = settings.GPU_VERIFY_NAMESPACE
    with suppress(kube.Conflict):  # there already
        client.create_namespace(namespace, {MANAGED_BY_LABEL: MANAGED_BY})
    with suppress(kube.Conflict):  # made by a pass whose worker did not live to record it
        client.create_job(namespace, manifest)
    count("kube_writes", "gpu_verify", "started")
    verification_running(verification)
    return True


def _verify_read(client: KubeClient, step: GpuVerifyRead) -> bool:
    verification = GpuVerification.objects.filter(
        pk=step.verification_id, job_name=step.job_name, status__in=GpuVerification.UNFINISHED
    ).first()
    if verification is None:
        return False
    namespace = settings.GPU_VERIFY_NAMESPACE
    if step.outcome == "succeeded":
        log = client.read_pod_log(
            namespace=namespace,
            name=step.pod_name,
            container=PROBE_CONTAINER,
            limit_bytes=LOG_LIMIT_BYTES,
        )
        verdict = verdict_of_log(log, count=step.count, gpu_type=step.gpu_type, driver=step.driver)
    else:
        message = step.pod_message
        if step.outcome == "failed" and step.pod_name:
            # A container that ran and failed said why (nvidia-smi: no driver, no device).
            said = _log_tail(client, namespace, step.pod_name)
            message = "; ".join(part for part in (message, said) if part)
        verdict = verdict_failed(step.outcome, step.pod_reason, message)
    if not verdict_record(verification, verdict):
        return False
    with suppress(kube.NotFound):  # gone already
        client.delete_job(namespace, step.job_name)
    return True


def _log_tail(client: KubeClient, namespace: str, pod: str) -> str:
    """The end of the probe container's log, on one line; "" when there is none to read."""
    try:
        log = client.read_pod_log(
            namespace=namespace, name=pod, container=PROBE_CONTAINER, limit_bytes=LOG_LIMIT_BYTES
        )
    except kube.KubeError:
        return ""  # it never started, or went: the pod's own reason says enough
    return " ".join(log.split())[-300:]


def _verify_job_delete(client: KubeClient, step: GpuVerifyJobDelete) -> bool:
    if GpuVerification.objects.filter(
        cluster_id=step.cluster_id, job_name=step.job_name, status__in=GpuVerification.UNFINISHED
    ).exists():
        return False  # a verification names it again
    with suppress(kube.NotFound):
        client.delete_job(settings.GPU_VERIFY_NAMESPACE, step.job_name)
    count("kube_writes", "gpu_verify", "job_deleted")
    return True
