"""What the control plane writes in a workload cluster, as steps of the cluster's plan: the
GPU labels of its nodes (`kube.gpu_nodes`) and the GPU add-on (`kube.gpu_addon`).

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
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

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
from kube.gpu_nodes import GPU_COUNT_LABEL, GPU_TYPE_LABEL, attached_gpus, gpus_by
from kube.models import KubeNode
from kube.selectors import cluster_observation

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

logger = logging.getLogger(__name__)

NODE_LABELS = "node_labels"
ADDON_APPLY = "gpu_addon_apply"
ADDON_REMOVE = "gpu_addon_remove"
KINDS = (NODE_LABELS, ADDON_APPLY, ADDON_REMOVE)
GPU_LABELS = (GPU_TYPE_LABEL, GPU_COUNT_LABEL)
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


KubeStep = NodeLabelsPatch | AddonApply | AddonRemove


def kube_plan(cluster: Cluster) -> list[KubeStep]:
    """The Kubernetes writes the next pass makes for the cluster, from the database only."""
    if cluster.state != Cluster.State.ACTIVE or not cluster.kubeconfig:
        return []  # its Kubernetes is not observed (clusters.selectors.kube_observed)
    return [*node_labels_plan(cluster), *addon_plan(cluster)]


def node_labels_plan(cluster: Cluster) -> list[NodeLabelsPatch]:
    if not cluster_observation(cluster).complete:
        return []
    # The cluster's nodes whose machine has vGPUs attached, a row per node and vGPU, with
    # the vGPU's card: one query.
    node = "machine__kube_nodes__"
    rows = list(
        attached_gpus(
            cluster,
            *(f"{node}{name}" for name in ("id", "name", "labels", "updated_at")),
            machine__kube_nodes__cluster=cluster,
        ).order_by(f"{node}name", f"{node}id")
    )
    gpus = gpus_by((pk, vendor, model) for pk, _, _, _, vendor, model in rows)
    nodes = {pk: (name, labels, seen_at) for pk, name, labels, seen_at, _, _ in rows}
    steps = []
    for pk, (name, labels, seen_at) in nodes.items():
        held = gpus.get(pk)
        if held is None:
            continue  # on a card not (or no longer) listed: its labels stay as they are
        wanted = held.labels
        if all(labels.get(key) == value for key, value in wanted.items()):
            continue
        steps.append(
            NodeLabelsPatch(
                cluster_id=cluster.pk,
                node_id=pk,
                node=name,
                labels=tuple(sorted(wanted.items())),
                removed=(),
                seen_at=seen_at,
                reason=f"its machine has {held.count} x {held.gpu_type} attached",
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
        assert isinstance(step, NodeLabelsPatch | AddonApply | AddonRemove)
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
