"""The GPUs of a cluster's nodes: the labels that say which GPUs a node has, and the flag
for a node whose GPUs are not advertised.

A node whose machine has vGPUs attached carries two labels, kept right by every pass over
a complete node listing:

* `capvco.io/gpu-type`: the type of the card its vGPUs are on, as the location's GPU
  listing names it ("NVIDIA A100"), made a label value (`nvidia-a100`): the same for every
  pool of that type, however the pool spelled it ("A100", "nvidia a100");
* `capvco.io/gpu-count`: how many are attached.

One merge patch per node whose labels differ from the listing (a new node, a replaced one,
labels someone removed); none when they are right. A node whose machine has no vGPU
attached any more loses both labels (the same patch, a null per label); one whose vGPUs
sit on a card the location no longer lists keeps them, so a label never flips while a
card is briefly not listed. Other labels are left alone. The patches are steps of the
cluster's plan (`kube.plan`), from complete listings only.

A node of a running machine of a GPU pool that advertises no allocatable `nvidia.com/gpu`
`GPU_ADVERTISE_TIMEOUT_SECONDS` after it joined (or after the GPU add-on was applied, if
later) is flagged (`KubeNode.gpus_missing`), from complete node listings only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db.models import OuterRef, QuerySet, Subquery

from capvco_web.integrations import kube
from clusters.models import Cluster, Machine
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of
from kube.models import GpuAddonState, KubeNode

GPU_TYPE_LABEL, GPU_COUNT_LABEL = kube.GPU_TYPE_LABEL, kube.GPU_COUNT_LABEL
# A GPU type's label value lives beside the label: clusters' capacity board reads it too.
gpu_label_value = kube.gpu_label_value
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class MachineGpus:
    """The vGPUs attached to a machine's VM: the type of their card, and how many."""

    gpu_type: str
    count: int

    @property
    def labels(self) -> dict[str, str]:
        return {GPU_TYPE_LABEL: gpu_label_value(self.gpu_type), GPU_COUNT_LABEL: str(self.count)}


def machine_gpus(cluster: Cluster) -> dict[int, MachineGpus]:
    """Each machine of the cluster with attached vGPUs whose card the mirror knows. All
    GPUs of a machine come from one card; a card not (or no longer) listed is left out
    rather than guessed from the pool's spelling, so that a label never flips."""
    return gpus_by(attached_gpus(cluster, "machine_id"))


def attached_gpus(
    cluster: Cluster, *keys: str, **where: Any
) -> QuerySet[VgpuReservation, tuple[Any, ...]]:
    """The vGPUs attached to the cluster's machines (and as `where` says), each as its
    `keys` and its card's vendor and model as listed (None: not listed), in one query."""
    card = GpuProfile.objects.filter(location=OuterRef("location"), profile_id=OuterRef("gpu_id"))
    return VgpuReservation.objects.filter(
        machine__pool__cluster=cluster, state=VgpuReservation.State.ATTACHED, **where
    ).values_list(*keys, Subquery(card.values("vendor")[:1]), Subquery(card.values("model")[:1]))


def gpus_by(rows: Iterable[tuple[K, str | None, str | None]]) -> dict[K, MachineGpus]:
    """The GPUs of each key (a machine, a node) from its attached vGPUs' (key, card vendor,
    card model), those on a card not listed left out."""
    counts: dict[K, int] = {}
    types: dict[K, str] = {}
    for key, vendor, model in rows:
        if vendor is None or model is None:
            continue
        gpu_type = gpu_type_of(GpuProfile(vendor=vendor, model=model))
        if not gpu_label_value(gpu_type):
            continue
        types[key] = gpu_type
        counts[key] = counts.get(key, 0) + 1
    return {key: MachineGpus(types[key], counts[key]) for key in types}


def node_gpu_flags(
    *,
    cluster: Cluster,
    complete: bool,
    listed_at: datetime,
    now: datetime,
    timeout: timedelta,
) -> int:
    """Raise or clear `gpus_missing` on the cluster's nodes; answers the rows written.

    Raised only from a complete node listing (begun at `listed_at`), for a node of a
    running machine of a GPU pool that shows no allocatable GPU although it joined
    `timeout` before the listing began, and the add-on (when on) was applied that long
    before too. Cleared as soon as the node advertises GPUs or stops being such a node.
    """
    gpus = machine_gpus(cluster)
    due_before = listed_at - timeout
    # The add-on on: its device plugin is given the time too, from when it was applied
    # (not yet: nothing is due; an add-on that cannot be applied shows its own error).
    addon_applied_at = _addon_applied_at(cluster)
    addon_since = (addon_applied_at or listed_at) if cluster.gpu_addon else None
    changed: list[KubeNode] = []
    for node in KubeNode.objects.filter(cluster=cluster).select_related(
        "machine__pool", "machine__deletion"
    ):
        machine = node.machine
        expected = (
            machine is not None
            and machine.pool.wants_gpus
            and machine.phase == Machine.Phase.RUNNING
            and not machine.deletion_asked
        )
        if not expected or node.gpu_allocatable > 0:
            missing, reason = False, ""
        elif not complete:
            continue  # only a whole listing raises the flag
        else:
            since = max(node.first_seen_at, addon_since or node.first_seen_at)
            missing = since <= due_before
            reason = _missing_reason(cluster, node, gpus.get(node.machine_id or 0), timeout)
            reason = reason if missing else ""
        if (node.gpus_missing, node.gpus_missing_reason) != (missing, reason):
            node.gpus_missing, node.gpus_missing_reason, node.updated_at = missing, reason, now
            changed.append(node)
    if changed:
        KubeNode.objects.bulk_update(changed, ["gpus_missing", "gpus_missing_reason", "updated_at"])
    return len(changed)


def _missing_reason(
    cluster: Cluster, node: KubeNode, gpus: MachineGpus | None, timeout: timedelta
) -> str:
    assert node.machine is not None
    pool = node.machine.pool
    has = (
        f"{gpus.count} x {gpus.gpu_type} attached"
        if gpus is not None
        else f"pool {pool.name} asks {pool.gpu_count} x {pool.gpu_type or 'GPU'}"
    )
    minutes = int(timeout.total_seconds() // 60)
    why = (
        "is the device plugin running there, and the driver installed?"
        if cluster.gpu_addon
        else "the GPU add-on is off for this cluster: nothing here installs the device plugin."
    )
    return f"No nvidia.com/gpu advertised {minutes} minutes after it joined ({has}): {why}"[:300]


def _addon_applied_at(cluster: Cluster) -> datetime | None:
    """Since when the add-on, as it is now, is in the cluster (kube.gpu_addon's record)."""
    try:
        return cluster.gpu_addon_state.applied_at
    except GpuAddonState.DoesNotExist:
        return None
