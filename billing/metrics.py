"""The money gauges on /metrics (capvco_web.metrics): what each location and cluster costs
per hour now (billing.costs), what each account and cluster cost this month so far (the
hourly rollups), and the leak ledger's open leaks and what leaks cost this month.

The labels are bounded by what operators made, never by what runs: accounts (by id, as
every series), their locations and clusters (by name), and currencies (one per location).
Nothing is labelled per machine, node, pod, namespace or leak. A cluster deleted this
month keeps its month-to-date series until the month ends, then it is gone. A scrape reads
a fixed number of queries (16), however many machines, hours or leaks there are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal

from django.db.models import QuerySet
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from billing.costs import ZERO, machine_costs, orphan_costs
from billing.models import Leak
from billing.rollups import month_of
from billing.selectors import cost_series, leak_totals
from cloud.models import Location
from clusters.models import Cluster

Labels = tuple[str, ...]


def collect() -> Iterator[Metric]:
    locations = Location.objects.all()
    where = {
        pk: (str(account_id), name, currency)
        for pk, account_id, name, currency in locations.values_list(
            "pk", "account_id", "name", "currency"
        )
    }
    # Every account in each currency it has a location in: 0 until something costs.
    accounts = {(account, currency) for account, _, currency in where.values()}
    yield from _rates(locations, where)
    yield from _month_to_date(locations, accounts)
    yield from _leaks(accounts)


def _gauge(name: str, help_text: str, labels: list[str], values: dict[Labels, Decimal]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=labels)
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), float(value))
    return family


def _rates(
    locations: QuerySet[Location], where: dict[int, tuple[str, str, str]]
) -> Iterator[Metric]:
    per_location: dict[Labels, Decimal] = {labels: ZERO for labels in where.values()}
    clusters = {
        pk: (str(account_id), name)
        for pk, account_id, name in Cluster.objects.values_list("pk", "account_id", "name")
    }
    per_cluster: dict[Labels, Decimal] = defaultdict(lambda: ZERO)
    for machine in machine_costs(locations):
        per_location[where[machine.location_id]] += machine.total
        per_cluster[(*clusters[machine.cluster_id], machine.currency)] += machine.total
    for orphans in orphan_costs(locations):
        per_location[where[orphans.location_id]] += orphans.vgpu + orphans.vm
    yield _gauge(
        "capvco_cost_per_hour",
        "What each location of an account costs per hour now at whitesky's prices: its "
        "machines' VMs and billed vGPUs, orphaned vGPUs and orphan VMs",
        ["account", "location", "currency"],
        per_location,
    )
    yield _gauge(
        "capvco_cluster_cost_per_hour",
        "What each cluster's machines (VMs and billed vGPUs) cost per hour now",
        ["account", "cluster", "currency"],
        per_cluster,
    )


def _month_to_date(
    locations: QuerySet[Location], accounts: set[tuple[str, str]]
) -> Iterator[Metric]:
    now = timezone.now()
    start = month_of(now)
    per_account: dict[Labels, Decimal] = {labels: ZERO for labels in accounts}
    for point in cost_series(
        group_by="account", locations=locations, start=start, end=now, step="month"
    ):
        per_account[str(point.account), point.currency] += point.total
    per_cluster: dict[Labels, Decimal] = defaultdict(lambda: ZERO)
    for point in cost_series(
        group_by="cluster", locations=locations, start=start, end=now, step="month"
    ):
        # By name: a cluster made again under a deleted one's name this month is one series.
        per_cluster[str(point.account), point.cluster_name or "", point.currency] += point.total
    yield _gauge(
        "capvco_cost_month_to_date",
        "What each account cost this calendar month (UTC) so far: its hours sampled by the "
        "hourly rollup, summed",
        ["account", "currency"],
        per_account,
    )
    yield _gauge(
        "capvco_cluster_cost_month_to_date",
        "What each cluster's machines cost this calendar month (UTC) so far, as sampled",
        ["account", "cluster", "currency"],
        per_cluster,
    )


def _leaks(accounts: set[tuple[str, str]]) -> Iterator[Metric]:
    now = timezone.now()
    totals = leak_totals(leaks=Leak.objects.all(), since=month_of(now), until=now)
    cost: dict[Labels, Decimal] = {labels: ZERO for labels in accounts}
    still_open: dict[Labels, Decimal] = {labels: ZERO for labels in accounts}
    for total in totals:
        labels = (str(total.account), total.currency)
        cost[labels] = total.cost
        still_open[labels] = Decimal(total.open)
    yield _gauge(
        "capvco_leaks_open",
        "vGPUs and VMs billed that no machine owns, open in the leak ledger",
        ["account", "currency"],
        still_open,
    )
    yield _gauge(
        "capvco_leak_cost_month_to_date",
        "What leaks cost this calendar month (UTC) so far, ended ones included",
        ["account", "currency"],
        cost,
    )
