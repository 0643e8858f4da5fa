"""The gauge of GPU nodes by the verdict on their GPUs on /metrics (capvco_web.metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
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
    rows = (
        verifications_latest(KubeNode.objects.filter(machine__pool__gpu_count__gt=0))
        .order_by()
        .values_list("cluster__account_id", "cluster__name", "verify_status")
        .annotate(n=Count("pk"))
    )
    counts: dict[tuple[int, str], dict[str, int]] = {}
    for account_id, cluster, verdict, n in rows:
        held = counts.setdefault((account_id, cluster), {})
        held[verdict or "none"] = held.get(verdict or "none", 0) + n
    for (account_id, cluster), held in sorted(counts.items()):
        for verdict in VERDICTS:
            family.add_metric([str(account_id), cluster, verdict], held.get(verdict, 0))
    yield family
