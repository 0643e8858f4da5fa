"""The gauges of accounts and locations on /metrics (capvco_web.metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from cloud.models import Account, Location, VirtualMachine


def collect() -> Iterator[Metric]:
    yield from _accounts()
    yield from _locations()


def _accounts() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "capvco_account_info",
        "The name of each account whose id the per-location series carry as `account`",
        labels=["account", "account_name"],
    )
    for pk, name in Account.objects.order_by("pk").values_list("pk", "name"):
        family.add_metric([str(pk), name], 1)
    yield family


def _locations() -> Iterator[Metric]:
    age = GaugeMetricFamily(
        "capvco_observation_age_seconds",
        "Seconds since the listings of the location's last complete observation began",
        labels=["account", "location"],
    )
    orphans = GaugeMetricFamily(
        "capvco_vms_orphaned",
        "VMs named by us that no machine owns (flagged from complete listings), billed",
        labels=["account", "location"],
    )
    now = timezone.now()
    rows = Location.objects.order_by("account_id", "name").values_list(
        "pk", "account_id", "name", "last_complete_observation_at"
    )
    orphaned = dict(
        VirtualMachine.objects.filter(orphaned_since__isnull=False)
        .order_by()
        .values_list("location_id")
        .annotate(n=Count("pk"))
    )
    for pk, account_id, name, at in rows:
        labels = [str(account_id), name]
        age.add_metric(labels, (now - at).total_seconds() if at else float("inf"))
        orphans.add_metric(labels, orphaned.get(pk, 0))
    yield age
    yield orphans
