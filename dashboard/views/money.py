"""Money over time: the leak ledger (open and ended leaks with what each cost), the latest
check of whitesky's bill per location with what it could not explain, and each money
chart's numbers as CSV (the overview's and a cluster page's)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing.filtersets import LeakFilterSet
from billing.models import BillCheck, BillItem, Leak
from billing.rollups import month_of
from billing.selectors import leak_totals
from capvco_web.api_csv import csv_cell
from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import Sort
from capvco_web.permissions import visible
from cloud.models import Location
from clusters.models import Cluster
from dashboard.charts import Chart
from dashboard.filtersets import filled, filtered_page, list_page
from dashboard.forms import LocationChoiceField
from dashboard.money import cluster_money, overview_money

PAGE_SIZE = 50
NEWEST_FIRST = Sort("leaked_since", True, "newest first")
ITEMS_SHOWN = 500  # of every check on the page together, the costliest first


@dataclass(frozen=True)
class LeakRow:
    leak: Leak
    cost: Decimal  # while leaked, to its end or now
    billed_cost: Decimal  # from first billed, owned time included


@require_GET
@list_page(LeakFilterSet)
def leak_list(request: HtmxHttpRequest) -> HttpResponse:
    leaks = visible(request.user, Leak.objects.all())
    filterset = LeakFilterSet(
        filled(request.GET),
        queryset=leaks.select_related("location", "account"),
        request=request,
    )
    filterset.form.fields["location"] = LocationChoiceField(
        visible(request.user, Location.objects.order_by("name")), required=False
    )
    now = timezone.now()
    context: dict[str, Any] = {
        "filterset": filterset,
        "params": request.GET,
        "page_url": request.get_full_path(),
        "list_url": reverse("dashboard:leaks"),
        "errors": [],
        "rows": [],
        "page": None,
        "now": now,
        "month_start": month_of(now),
        "totals": leak_totals(leaks=leaks, since=month_of(now), until=now),
    }
    found = filtered_page(filterset, params=request.GET, sort=NEWEST_FIRST, size=PAGE_SIZE)
    context["errors"] = found.errors
    if (page := found.page) is not None:
        context["page"] = page
        context["rows"] = [
            LeakRow(leak, leak.cost().quantize(Decimal("0.01")),
                    leak.billed_cost().quantize(Decimal("0.01")))
            for leak in page.rows
        ]  # fmt: skip
    return page_or_fragment(
        request, "dashboard/leaks.html", context, fragments=["leak-table"], status=found.status
    )


@dataclass
class CheckRow:
    check: BillCheck
    items: list[BillItem]
    item_count: int


@require_GET
def bill_checks(request: HtmxHttpRequest) -> HttpResponse:
    """The latest check of each location the user sees, with the objects it could not
    explain (and the known leaks it billed), the costliest first."""
    checks = visible(request.user, BillCheck.objects.all())
    latest = checks.filter(
        start=Subquery(
            BillCheck.objects.filter(location=OuterRef("location"))
            .order_by("-start")
            .values("start")[:1]
        )
    )
    shown = list(
        latest.select_related("location__account")
        .annotate(item_count=Count("items"))
        .order_by("location__name", "location_id")
    )
    items: dict[int, list[BillItem]] = {check.pk: [] for check in shown}
    for item in visible(request.user, BillItem.objects.filter(bill__in=list(items))).order_by(
        "-cost", "pk"
    )[:ITEMS_SHOWN]:
        items[item.bill_id].append(item)
    context = {
        "rows": [CheckRow(check, items[check.pk], check.item_count) for check in shown],
        "unexplained_total": _sums(shown),
        "page_url": request.get_full_path(),
    }
    return page_or_fragment(request, "dashboard/bills.html", context, fragments=["bill-checks"])


def _sums(checks: Sequence[BillCheck]) -> list[tuple[str, Decimal]]:
    """What the latest checks could not explain, per currency."""
    sums: dict[str, Decimal] = {}
    for check in checks:
        sums[check.currency] = sums.get(check.currency, Decimal(0)) + check.unexplained
    return sorted(sums.items())


# --- each chart's numbers as CSV ----------------------------------------------------------


def _csv(chart: Chart, name: str) -> HttpResponse:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(csv_cell(c) for c in chart.columns)
    for row in chart.rows:
        writer.writerow(csv_cell(c) for c in row)
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    return HttpResponse(
        out.getvalue(),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}-{chart.key}-{stamp}.csv"'},
    )


def _chart(charts: list[Chart], key: str) -> Chart:
    found = next((chart for chart in charts if chart.key == key), None)
    if found is None:
        raise Http404(f"No chart {key!r} here.")
    return found


@require_GET
def overview_chart_csv(request: HtmxHttpRequest, chart: str) -> HttpResponse:
    money = overview_money(
        locations=visible(request.user, Location.objects.all()),
        leaks=visible(request.user, Leak.objects.all()),
        now=timezone.now(),
    )
    return _csv(_chart(money.charts, chart), "overview")


@require_GET
def cluster_chart_csv(request: HtmxHttpRequest, pk: int, chart: str) -> HttpResponse:
    cluster = get_object_or_404(visible(request.user, Cluster.objects.all()), pk=pk)
    money = cluster_money(
        cluster=cluster, locations=cluster_locations(request, cluster), now=timezone.now()
    )
    return _csv(_chart(money.charts, chart), f"cluster-{cluster.name}")


def cluster_locations(request: HtmxHttpRequest, cluster: Cluster) -> QuerySet[Location]:
    """The locations a cluster's history can be in that the user sees: its account's
    (a site removed since keeps its history there)."""
    return visible(request.user, Location.objects.filter(account_id=cluster.account_id))
