"""The autoscaler on /metrics (capvco_web.metrics): its decisions, how long GPU pods wait,
and what GPUs no pod requested were paid for."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import DurationField, ExpressionWrapper, F, Min, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from autoscale.models import GpuShortfall
from billing.models import IdleSpell
from capvco_web.counters import counters
from kube.models import KubePod
from kube.pending_pods import unscheduled_gpu_pods


def collect() -> Iterator[Metric]:
    now = timezone.now()
    decisions = CounterMetricFamily(
        "capvco_autoscale_decisions",
        "Decisions of the pool autoscaler, by direction (up, down, keep) and reason",
        labels=["direction", "reason"],
    )
    for (direction, reason), value in sorted(counters().read("autoscale_decisions").items()):
        decisions.add_metric([direction, reason], value)
    yield decisions
    pending = GaugeMetricFamily(
        "capvco_gpu_pod_pending_oldest_seconds",
        "Age of the oldest GPU pod of the cluster that no node has taken (0: none waits)",
        labels=["account", "cluster"],
    )
    oldest = (
        unscheduled_gpu_pods(KubePod.objects.all())
        .order_by()
        .values("cluster__account_id", "cluster__name")
        .annotate(first=Min("first_seen_at"))
    )
    for row in sorted(oldest, key=lambda r: (r["cluster__account_id"], r["cluster__name"])):
        age = _seconds(now, row["first"])
        pending.add_metric([str(row["cluster__account_id"]), row["cluster__name"]], age)
    yield pending
    short = GaugeMetricFamily(
        "capvco_gpu_shortfall_pods",
        "GPU pods that no autoscaled pool can take now (every pool of their type at its "
        "max, or no card with room), by type and GPUs per pod",
        labels=["account", "cluster", "gpu_type", "gpus"],
    )
    shortfalls = GpuShortfall.objects.select_related("cluster").order_by("cluster__name", "pk")
    for found in shortfalls:
        cluster = found.cluster
        labels = [str(cluster.account_id), cluster.name, found.gpu_type or "any", str(found.gpus)]
        short.add_metric(labels, found.pods)
    yield short
    idle = GaugeMetricFamily(
        "capvco_gpu_idle_paid_hours",
        "GPU-hours paid for GPUs no pod requested, over the idle spells kept (billing "
        "history), per account and cluster",
        labels=["account", "cluster"],
    )
    # One grouped query, however many spells (by GPU count too: a duration times a count
    # is not portable SQL); a spell still open counts until now.
    spent = ExpressionWrapper(
        Coalesce(F("ended_at"), Value(now)) - F("since"), output_field=DurationField()
    )
    rows = (
        IdleSpell.objects.order_by()
        .values_list("account_id", "cluster_name", "idle_gpus")
        .annotate(total=Sum(spent))
    )
    hours: dict[tuple[int, str], float] = {}
    for account_id, cluster_name, gpus, total in rows:
        key = (account_id, cluster_name)
        hours[key] = hours.get(key, 0.0) + (total.total_seconds() / 3600 * gpus if total else 0.0)
    for (account_id, cluster_name), gpu_hours in sorted(hours.items()):
        idle.add_metric([str(account_id), cluster_name], round(gpu_hours, 4))
    yield idle


def _seconds(later: datetime, earlier: datetime) -> float:
    return max((later - earlier).total_seconds(), 0.0)
