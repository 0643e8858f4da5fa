"""vGPU reservations: the API's filters (one FilterSet), keyset pages in two orders, a
search bounded by an index, the columns an operator chooses (`cols`), and a CSV export of
the filtered set with those columns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse, QueryDict, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import CURSOR_PARAMS, BadCursor, KeysetPage, keyset_page
from capvco_web.permissions import allowed, visible
from cloud.models import Location, VirtualMachine
from clusters.models import Cluster
from dashboard.columns import COLUMNS, columns_chosen
from dashboard.csv_export import CHUNK, csv_refused, csv_response
from dashboard.filtersets import cluster_field, filled, list_page, unknown_parameters
from dashboard.forms import LocationChoiceField
from dashboard.lists import LISTS, RESERVATION_COLUMNS, RESERVATION_SORTS, list_query
from dashboard.views.saved import saved_views_context
from gpus import naming
from gpus.filtersets import VgpuReservationFilterSet
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of
from gpus.services import RELEASABLE, release_request_pending

TEMPLATE = "dashboard/reservations.html"
PAGE_SIZE = 50
DEFAULT_SORT = "-created"
RELEASE = "gpus.release_vgpureservation"


@dataclass
class ReservationRow:
    """A reservation with what its row links to, read for the whole page at once."""

    reservation: VgpuReservation
    gpu_type: str
    vm: VirtualMachine | None
    cluster_id: int | None
    can_release: bool
    release_pending: bool
    accrued_cost: Decimal
    named_by_us: bool


def _reservations(request: HtmxHttpRequest) -> QuerySet[VgpuReservation]:
    return visible(
        request.user,
        VgpuReservation.objects.select_related(
            "location", "machine__pool__cluster", "release_requested_by", "listed"
        ),
    )


def reservation_filterset(request: HtmxHttpRequest, params: QueryDict) -> VgpuReservationFilterSet:
    """The API's FilterSet over what the user sees; its choices too. The form's fields left
    empty are left out, as the API wants them."""
    filterset = VgpuReservationFilterSet(
        filled(params), queryset=_reservations(request), request=request
    )
    fields = filterset.form.fields
    fields["location"] = LocationChoiceField(
        visible(request.user, Location.objects.order_by("name")), required=False
    )
    fields["cluster"] = cluster_field(visible(request.user, Cluster.objects.all()))
    fields["type"].widget.attrs["list"] = "gpu-types"
    return filterset


def _card_types(
    request: HtmxHttpRequest, cards: QuerySet[GpuProfile]
) -> dict[tuple[int, str], str]:
    """The GPU type of each card the user sees, by (location id, profile id)."""
    return {(c.location_id, c.profile_id): gpu_type_of(c) for c in visible(request.user, cards)}


def _rows(
    request: HtmxHttpRequest, reservations: list[VgpuReservation], shown: frozenset[str]
) -> list[ReservationRow]:
    """The page's rows; what only a hidden column shows is not read."""
    now = timezone.now()
    location_ids = {r.location_id for r in reservations}
    types = (
        _card_types(request, GpuProfile.objects.filter(location_id__in=location_ids))
        if "gpu" in shown
        else {}
    )
    vm_ids = {r.vm_id for r in reservations if r.vm_id is not None}
    vms = (
        {
            (vm.location_id, vm.vm_id): vm
            for vm in visible(
                request.user,
                VirtualMachine.objects.filter(location_id__in=location_ids, vm_id__in=vm_ids),
            )
        }
        if "vm" in shown
        else {}
    )
    # Cluster names are unique per whitesky customer, not overall: read with the account.
    owners = {r.owner_cluster for r in reservations if r.machine is None and r.owner_cluster}
    clusters = (
        {
            (account_id, name): pk
            for account_id, name, pk in visible(
                request.user, Cluster.objects.filter(name__in=owners)
            ).values_list("account_id", "name", "pk")
        }
        if "owner" in shown
        else {}
    )
    rows = []
    for r in reservations:
        pending = release_request_pending(r)
        cluster_id = (
            r.machine.pool.cluster_id
            if r.machine
            else clusters.get((r.location.account_id, r.owner_cluster))
        )
        rows.append(
            ReservationRow(
                reservation=r,
                gpu_type=types.get((r.location_id, r.gpu_id), ""),
                vm=vms.get((r.location_id, r.vm_id)) if r.vm_id is not None else None,
                cluster_id=cluster_id,
                # A machine's GPU goes with its machine (scale down, delete it): the
                # service refuses it; no button offers it.
                can_release=(
                    r.machine_id is None
                    and r.vgpu_id is not None
                    and r.state in RELEASABLE
                    and not pending
                    and allowed(request.user, RELEASE, r)
                ),
                release_pending=pending,
                accrued_cost=r.accrued_cost(now),
                named_by_us=r.name.startswith(naming.PREFIX),
            )
        )
    return rows


def reservation_table(request: HtmxHttpRequest, params: QueryDict) -> tuple[dict[str, Any], int]:
    """The list as `params` (a page's query) asks for it, and the status to answer."""
    filterset = reservation_filterset(request, params)
    sort_key = params.get("sort") or DEFAULT_SORT
    list_url = reverse("dashboard:reservations")
    chosen = columns_chosen(params, RESERVATION_COLUMNS)
    context: dict[str, Any] = {
        "filterset": filterset,
        "chosen": chosen,
        "shown": chosen.keys,
        "params": params,
        "sort_key": sort_key,
        "sorts": RESERVATION_SORTS,
        "page_url": f"{list_url}?{params.urlencode()}" if params else list_url,
        "list_url": list_url,
        "gpu_types": sorted(
            {gpu_type_of(c) for c in visible(request.user, GpuProfile.objects.all())}
        ),
        "errors": [],
        "rows": [],
        "page": None,
        **saved_views_context(request, "reservations", params),
    }
    if unknown := unknown_parameters(params, [*filterset.filters, "sort", COLUMNS, *CURSOR_PARAMS]):
        context["errors"] += unknown
        return context, 400
    if chosen.errors:
        context["errors"] += chosen.errors
        return context, 400
    sort = RESERVATION_SORTS.get(sort_key)
    if sort is None:
        context["errors"].append(
            f"Unknown sort {sort_key!r}: use one of {', '.join(RESERVATION_SORTS)}."
        )
        return context, 400
    if not filterset.is_valid():
        for field, messages in filterset.form.errors.items():
            context["errors"] += [f"{field}: {message}" for message in messages]
        return context, 400
    try:
        page: KeysetPage[VgpuReservation] = keyset_page(
            filterset.qs, sort=sort, params=params, size=PAGE_SIZE
        )
    except BadCursor as exc:
        context["errors"].append(str(exc))
        return context, 400
    context["page"] = page
    context["rows"] = rows = _rows(request, page.rows, chosen.keys)
    # The selection's release is offered where a row of the page can be selected.
    context["selectable"] = any(row.can_release and row.reservation.orphaned_since for row in rows)
    context["csv_query"] = list_query(params).urlencode()
    return context, 200


@require_GET
@list_page(VgpuReservationFilterSet)
def reservation_list(request: HtmxHttpRequest) -> HttpResponse:
    context, status = reservation_table(request, request.GET)
    return page_or_fragment(
        request, TEMPLATE, context, fragments=["reservation-table"], status=status
    )


# --- CSV --------------------------------------------------------------------------------

CSV_COLUMNS = [
    "id", "name", "location", "gpu_type", "card", "state", "vgpu_id", "vm_id", "cluster",
    "pool", "machine", "created_at", "first_seen_at", "unassigned_since", "orphaned_since",
    "released_at", "release_requested_by", "release_reason", "currency", "cost_per_hour",
    "accrued_cost",
]  # fmt: skip


def _csv_rows(
    request: HtmxHttpRequest, rows: QuerySet[VgpuReservation], columns: list[str]
) -> Iterator[dict[str, object]]:
    now = timezone.now()
    types = _card_types(request, GpuProfile.objects.all()) if "gpu_type" in columns else {}
    for r in rows.iterator(chunk_size=CHUNK):
        machine = r.machine
        by = r.release_requested_by
        yield dict(zip(CSV_COLUMNS, [
            r.pk, r.name, r.location.name, types.get((r.location_id, r.gpu_id), ""),
            r.gpu_id, r.state, r.vgpu_id, r.vm_id,
            machine.pool.cluster.name if machine else r.owner_cluster,
            machine.pool.name if machine else "",
            machine.name if machine else r.owner_machine,
            r.created_at, r.first_seen_at, r.unassigned_since, r.orphaned_since,
            r.released_at, by.get_username() if by else "", r.release_reason,
            r.location.currency, r.hourly_cost.quantize(Decimal("0.0001")),
            r.accrued_cost(now),
        ], strict=True))  # fmt: skip


@require_GET
@list_page(VgpuReservationFilterSet)
def reservation_csv(request: HtmxHttpRequest) -> HttpResponse | StreamingHttpResponse:
    """Every reservation the filters select (not one page), as CSV, with the columns the
    page shows (`cols`)."""
    filterset = reservation_filterset(request, request.GET)
    # The list's own query, less its page: the sort is read there, not here.
    if problems := LISTS["reservations"].query_problems(request.GET, filterset):
        return csv_refused(problems)
    columns = columns_chosen(request.GET, RESERVATION_COLUMNS).csv(CSV_COLUMNS)
    rows = filterset.qs.order_by("created_at", "id")
    return csv_response("reservations", columns, _csv_rows(request, rows, columns))
