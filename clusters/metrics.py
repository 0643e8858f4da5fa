"""The gauges of machines and of each cluster's Kubernetes observation on /metrics
(capvco_web.metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from cloud.models import Account
from clusters.models import Machine
from clusters.selectors import kube_observed


def collect() -> Iterator[Metric]:
    yield from _machines()
    yield from _kube_observations()


def _machines() -> Iterator[Metric]:
    """Every phase of every account, 0 included: an alert names the account whose machines
    failed, and a phase with none is a series that reads 0, not one that vanished."""
    family = GaugeMetricFamily(
        "capvco_machines", "Machines per account and phase", labels=["account", "phase"]
    )
    stuck_family = GaugeMetricFamily(
        "capvco_machines_stuck",
        "Machines waiting for capacity past MACHINE_CAPACITY_STUCK_SECONDS (they keep waiting)",
        labels=["account"],
    )
    # The stuck ones counted in the same query: a scrape's queries stay as they were.
    rows = (
        Machine.objects.order_by()
        .values_list("pool__cluster__account_id", "phase")
        .annotate(n=Count("pk"), stuck=Count("pk", filter=Q(capacity_stuck_since__isnull=False)))
    )
    per_phase = {(account_id, phase): n for account_id, phase, n, _ in rows}
    stuck: dict[int, int] = {}
    for account_id, _, _, n in rows:
        stuck[account_id] = stuck.get(account_id, 0) + n
    for account_id in Account.objects.order_by("pk").values_list("pk", flat=True):
        for phase in Machine.Phase.values:
            family.add_metric([str(account_id), phase], per_phase.get((account_id, phase), 0))
        stuck_family.add_metric([str(account_id)], stuck.get(account_id, 0))
    yield family
    yield stuck_family


def _kube_observations() -> Iterator[Metric]:
    """One series per cluster whose Kubernetes is observed (active, with a kubeconfig)."""
    ok = GaugeMetricFamily(
        "capvco_cluster_kube_observation_ok",
        "1 when the cluster's last Kubernetes observation listed every node and pod without "
        "error, 0 when it failed, was partial or has not run yet",
        labels=["account", "cluster"],
    )
    age = GaugeMetricFamily(
        "capvco_cluster_kube_observation_age_seconds",
        "Seconds since the listings of the cluster's last complete Kubernetes observation "
        "began (+Inf: never)",
        labels=["account", "cluster"],
    )
    now = timezone.now()
    rows = (
        kube_observed()
        .order_by("account_id", "name")
        .values_list(
            "account_id",
            "name",
            # kube's row of the cluster's observation: none (None here) until its first
            "kube_observation__complete",
            "kube_observation__error",
            "kube_observation__last_complete_at",
        )
    )
    for account_id, name, complete, error, last in rows:
        labels = [str(account_id), name]
        ok.add_metric(labels, 1 if complete and not error else 0)
        age.add_metric(labels, (now - last).total_seconds() if last else float("inf"))
    yield ok
    yield age
