"""The gauges of accounts and locations on /metrics (capvco_web.metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from cloud.models import Account, Location


def collect() -> Iterator[Metric]:
    yield from _accounts()
    yield from _observation_age()


def _accounts() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "capvco_account_info",
        "The name of each account whose id the per-location series carry as `account`",
        labels=["account", "account_name"],
    )
    for pk, name in Account.objects.order_by("pk").values_list("pk", "name"):
        family.add_metric([str(pk), name], 1)
    yield family


def _observation_age() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "capvco_observation_age_seconds",
        "Seconds since the listings of the location's last complete observation began",
        labels=["account", "location"],
    )
    now = timezone.now()
    rows = Location.objects.order_by("account_id", "name").values_list(
        "account_id", "name", "last_complete_observation_at"
    )
    for account_id, name, at in rows:
        family.add_metric(
            [str(account_id), name], (now - at).total_seconds() if at else float("inf")
        )
    yield family
