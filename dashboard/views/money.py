"""Money over time: the leak ledger (open and ended leaks with what each cost), the latest
check of whitesky's bill per location with what it could not explain, the money section of
a page over the window its query asks for, and each money chart's numbers as CSV (the
overview's, a location page's and a cluster page's) over the same window."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import ValidationError
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
from billing.windows import (
    HOURLY_DAYS_MAX,
    PRESETS,
    WINDOW_STEPS,
    Window,
    preset_step,
    window_from,
)
from billing.windows import PARAMETERS as WINDOW_PARAMETERS
from capvco_web.api_csv import csv_cell
from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import Sort
from capvco_web.permissions import visible
from cloud.models import Location
from clusters.models import Cluster
from dashboard.charts import Chart
from dashboard.filtersets import filled, filtered_page, list_page
from dashboard.forms import LocationChoiceField
from dashboard.money import Money, cluster_money, overview_money

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


# --- the window of a page's charts, and each chart's numbers as CSV ----------------------


def _window(request: HtmxHttpRequest, now: datetime) -> tuple[Window | None, list[str]]:
    """The window the request's query asks for, or why it is refused."""
    try:
        return window_from(request.GET, now=now), []
    except ValidationError as exc:
        problems = exc.message_dict.items()
        return None, [f"{name}: {m}" for name, messages in problems for m in messages]


# What reads a page's money over a window (None: the window asked for was refused) as of
# a moment; given a chart's key, what that chart needs alone (its CSV).
MoneyReader = Callable[[Window | None, datetime, str | None], Money]


def money_section(
    request: HtmxHttpRequest,
    read: MoneyReader,
    *,
    csv_url: Callable[[str], str],
    api_query: dict[str, str],
    now: datetime | None = None,
) -> tuple[dict[str, Any], int]:
    """A page's money section over the window its query asks for (`read` reads it), each
    chart's CSV asked for the same window; and the status the page answers with: 400 when
    the window is refused (the page says why, and draws no chart)."""
    now = now or timezone.now()
    window, errors = _window(request, now)
    money = read(window, now, None)
    asked = urlencode(window.query) if window else ""
    for chart in money.charts:
        chart.csv_url = f"{csv_url(chart.key)}?{asked}"
    context: dict[str, Any] = {
        "money": money,
        "window_errors": errors,
        # Each preset with the step it keeps: the page's, unless it is too long by the hour.
        "window_presets": [
            (name, label, preset_step(name, window.step if window else ""))
            for name, (label, _) in PRESETS.items()
        ],
        "window_steps": WINDOW_STEPS,
        "window_hours_max": HOURLY_DAYS_MAX,
        # What the custom window's form sends again beside it (the page's other params),
        # and what the page's other forms send again (the window asked for).
        "window_kept": [
            (name, value)
            for name, values in request.GET.lists()
            if name not in WINDOW_PARAMETERS
            for value in values
        ],
        "window_asked": [
            (name, value)
            for name, values in request.GET.lists()
            if name in WINDOW_PARAMETERS
            for value in values
        ],
    }
    if window is not None:
        bounds = {"start": _iso(window.start), "end": _iso(window.end), "step": window.step}
        context["window_api"] = f"{reverse('costs')}?{urlencode({**api_query, **bounds}, safe=':')}"
    return context, 400 if errors else 200


def _iso(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"


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


def _chart_csv(request: HtmxHttpRequest, read: MoneyReader, key: str, name: str) -> HttpResponse:
    """A chart's numbers over the window asked for (the page's), or 400 saying why not."""
    now = timezone.now()
    window, errors = _window(request, now)
    if window is None:
        return HttpResponse(
            "\n".join(errors) + "\n", status=400, content_type="text/plain; charset=utf-8"
        )
    found = next((chart for chart in read(window, now, key).charts if chart.key == key), None)
    if found is None:
        raise Http404(f"No chart {key!r} here.")
    return _csv(found, name)


@require_GET
def overview_chart_csv(request: HtmxHttpRequest, chart: str) -> HttpResponse:
    return _chart_csv(request, overview_reader(request), chart, "overview")


@require_GET
def location_chart_csv(request: HtmxHttpRequest, pk: int, chart: str) -> HttpResponse:
    location = get_object_or_404(visible(request.user, Location.objects.all()), pk=pk)
    return _chart_csv(
        request, location_reader(request, location), chart, f"location-{location.name}"
    )


@require_GET
def cluster_chart_csv(request: HtmxHttpRequest, pk: int, chart: str) -> HttpResponse:
    cluster = get_object_or_404(visible(request.user, Cluster.objects.all()), pk=pk)
    return _chart_csv(request, cluster_reader(request, cluster), chart, f"cluster-{cluster.name}")


def overview_reader(request: HtmxHttpRequest) -> MoneyReader:
    """The overview's money over a window, as the user may see it."""
    return lambda window, now, chart: overview_money(
        locations=visible(request.user, Location.objects.all()),
        leaks=visible(request.user, Leak.objects.all()),
        now=now,
        window=window,
        chart=chart,
    )


def location_reader(request: HtmxHttpRequest, location: Location) -> MoneyReader:
    """A location's money over a window: the overview's, of that location alone."""
    return lambda window, now, chart: overview_money(
        locations=Location.objects.filter(pk=location.pk),
        leaks=visible(request.user, Leak.objects.filter(location=location)),
        now=now,
        window=window,
        chart=chart,
    )


def cluster_reader(request: HtmxHttpRequest, cluster: Cluster) -> MoneyReader:
    # A cluster's charts are read from one series: a chart's CSV reads them all.
    return lambda window, now, _chart: cluster_money(
        cluster=cluster, locations=cluster_locations(request, cluster), now=now, window=window
    )


def cluster_locations(request: HtmxHttpRequest, cluster: Cluster) -> QuerySet[Location]:
    """The locations a cluster's history can be in that the user sees: its account's
    (a site removed since keeps its history there)."""
    return visible(request.user, Location.objects.filter(account_id=cluster.account_id))
