"""The Kubernetes gauges of /metrics (capvco_web.metrics): GPU nodes by the verdict on
their GPUs, and each cluster's GPU use as its last read of dcgm-exporter left it."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from kube.models import GpuUseState, GpuVerification, KubeNode
from kube.selectors import verifications_latest

# A node of a GPU pool no verification has judged yet: `none`.
VERDICTS = (*GpuVerification.Status.values, "none")


def collect() -> Iterator[Metric]:
    yield from _gpu_nodes()
    yield from _gpu_use()


def _gpu_nodes() -> Iterator[Metric]:
    """Every verdict of every cluster with GPU nodes, 0 included: an alert names the
    cluster, and a verdict with no node is a series that reads 0, not one that vanished."""
    family = GaugeMetricFamily(
        "capvco_gpu_nodes",
        "Nodes of GPU pools by the verdict of the last verification of their GPUs by a pod "
        "that uses them (none: not verified yet)",
        labels=["account", "cluster", "verdict"],
    )
    nodes = verifications_latest(
        KubeNode.objects.filter(machine__pool__gpu_count__gt=0)
        .select_related("cluster")
        .only("uid", "cluster__account_id", "cluster__name")
    )
    counts: dict[tuple[int, str], dict[str, int]] = {}
    for node in nodes:
        held = counts.setdefault((node.cluster.account_id, node.cluster.name), {})
        verdict = getattr(node, "verify_status", None) or "none"
        held[verdict] = held.get(verdict, 0) + 1
    for (account_id, cluster), held in sorted(counts.items()):
        for verdict in VERDICTS:
            family.add_metric([str(account_id), cluster, verdict], held.get(verdict, 0))
    yield family


# A GPU's use in the window, as kube.gpu_use.gpu_use says it (GpuUseState's columns).
USES = {"in_use": "gpus_in_use", "unused": "gpus_unused", "idle": "gpus_idle"}


def _gpu_use() -> Iterator[Metric]:
    """Per cluster whose exporter was read: its GPUs by use (`unused`: requested but
    unused), its efficiency where pods held GPUs, and when it was read. The figures are the
    cluster page's and `/api/v1/clusters/<id>/gpu-use/`'s, kept at each read."""
    labels = ["account", "cluster"]
    gpus = GaugeMetricFamily(
        "capvco_gpus_by_use",
        "GPUs the last read of a cluster's dcgm-exporter saw, by use over the window: in_use, "
        "unused (held by pods below GPU_UNUSED_PERCENT for GPU_UNUSED_HOURS) and idle (no pod)",
        labels=[*labels, "use"],
    )
    efficiency = GaugeMetricFamily(
        "capvco_gpu_use_efficiency_ratio",
        "Used GPU-time over GPU-time held by pods, over the window (no series: none held)",
        labels=labels,
    )
    read = GaugeMetricFamily(
        "capvco_gpu_use_read_timestamp_seconds",
        "When the cluster's dcgm-exporter was last looked for and read",
        labels=labels,
    )
    states = GpuUseState.objects.select_related("cluster").order_by("cluster__name", "pk")
    for state in states:
        names = [str(state.cluster.account_id), state.cluster.name]
        for use, column in USES.items():
            gpus.add_metric([*names, use], getattr(state, column))
        if state.efficiency_percent is not None:
            efficiency.add_metric(names, float(state.efficiency_percent / 100))
        read.add_metric(names, state.looked_at.timestamp())
    yield from (gpus, efficiency, read)
