"""The gauge of GPU nodes by the verdict on their GPUs on /metrics (capvco_web.metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from kube.models import GpuVerification, KubeNode
from kube.selectors import verifications_latest

# A node of a GPU pool no verification has judged yet: `none`.
VERDICTS = (*GpuVerification.Status.values, "none")


def collect() -> Iterator[Metric]:
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
