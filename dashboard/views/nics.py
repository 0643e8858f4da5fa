"""SR-IOV NICs of the pods: each pod's NIC (by cluster and state, newest first, by
keyset), each VM's attach queue, the leaked NICs with the operator's detach, and the
address use of the external networks per location. All through `sriov.selectors`, which
keep to the user's accounts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponse, QueryDict
from django.urls import reverse
from django.views.decorators.http import require_GET
from django_filters import FilterSet

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import CURSOR_PARAMS, BadCursor, Sort, keyset_page
from capvco_web.permissions import allowed, visible
from cloud.models import Location
from clusters.models import Cluster
from dashboard.filtersets import (
    NicListFilterSet,
    cluster_field,
    filled,
    list_page,
    only,
    unknown_parameters,
)
from dashboard.forms import LocationChoiceField
from sriov.filtersets import LeakedNicFilterSet, VmQueueFilterSet
from sriov.models import LeakedNic, PodNic
from sriov.selectors import leaked_nics, network_address_use, pod_nics, vm_queues

TEMPLATE = "dashboard/nics.html"
FRAGMENTS = ["nic-table", "nic-activity", "nic-body"]  # the first: when htmx names none
TABLE, ACTIVITY = "nic-table", "nic-activity"
BOTH = frozenset([TABLE, ACTIVITY])
PAGE_SIZE = 50
# Queues and leaked NICs are few when all is well; past these a page says how many more.
QUEUES_SHOWN = 50
LEAKED_SHOWN = 50
NEWEST_FIRST = Sort("requested_at", True, "newest first")


@dataclass
class LeakedRow:
    nic: LeakedNic
    detach_url: str  # empty: not offered
    network: str = ""  # the external network's name, as listed ("" when it is not)


def _filters(request: HtmxHttpRequest, params: QueryDict) -> dict[str, Any]:
    """The filters as `params` gives them (the API's pod NIC filters), and what every part
    of the page links with."""
    list_url = reverse("dashboard:nics")
    filterset = NicListFilterSet(filled(params), queryset=pod_nics(request.user), request=request)
    fields = filterset.form.fields
    fields["cluster"] = cluster_field(visible(request.user, Cluster.objects.all()))
    fields["location"] = LocationChoiceField(
        visible(request.user, Location.objects.order_by("name")),
        required=False,
        empty_label="any",
    )
    errors = unknown_parameters(params, [*filterset.filters, *CURSOR_PARAMS])
    if not errors and not filterset.is_valid():
        errors = [
            f"{field}: {message}"
            for field, messages in filterset.form.errors.items()
            for message in messages
        ]
    return {
        "filterset": filterset,
        "form": filterset.form,
        "params": params,
        "list_url": list_url,
        "page_url": f"{list_url}?{params.urlencode()}" if params else list_url,
        "errors": errors,
    }


def _shared(filters: dict[str, Any], filterset: type[FilterSet]) -> QueryDict:
    """The filters of the page that the queues and the leaked NICs take too (the NICs'
    cluster, location, account)."""
    return only(filled(filters["params"]), set(filterset.base_filters))


def nic_table(request: HtmxHttpRequest, filters: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A page of the pod NICs the filters select, and the status to answer."""
    found: dict[str, Any] = {"rows": [], "page": None}
    if filters["errors"]:
        return found, 400
    rows = filters["filterset"].qs
    try:
        page = keyset_page(rows, sort=NEWEST_FIRST, params=filters["params"], size=PAGE_SIZE)
    except BadCursor as exc:
        filters["errors"].append(str(exc))
        return found, 400
    found["page"], found["rows"] = page, page.rows
    return found, 200


def nic_activity(request: HtmxHttpRequest, filters: dict[str, Any]) -> dict[str, Any]:
    """Each VM's attach queue and the leaked NICs (of the cluster filtered on, if one),
    and the address use of the external networks per location. Nothing while the filters
    are wrong: the table says why."""
    found: dict[str, Any] = {
        "queues": [],
        "queues_more": 0,
        "leaked": [],
        "leaked_more": 0,
        "networks": [],
    }
    if filters["errors"]:
        return found
    nics = VmQueueFilterSet(_shared(filters, VmQueueFilterSet), queryset=PodNic.objects.all())
    queues = vm_queues(request.user, nics=nics.qs)
    found["queues"] = queues[:QUEUES_SHOWN]
    found["queues_more"] = max(0, len(queues) - QUEUES_SHOWN)
    leaked = LeakedNicFilterSet(
        _shared(filters, LeakedNicFilterSet), queryset=leaked_nics(request.user)
    ).qs
    shown = list(leaked[: LEAKED_SHOWN + 1])
    if len(shown) > LEAKED_SHOWN:
        found["leaked_more"] = leaked.count() - LEAKED_SHOWN
    back = "?" + urlencode({"next": filters["page_url"]})
    found["networks"] = network_address_use(request.user)
    names = {(u.location, u.network_id): u.name for u in found["networks"]}
    found["leaked"] = [
        LeakedRow(
            nic,
            reverse("dashboard:leaked-nic-detach", args=[nic.pk]) + back
            if nic.detach_requested_at is None
            and allowed(request.user, "sriov.detach_leakednic", nic)
            else "",
            names.get((nic.location.name, nic.network_id), ""),
        )
        for nic in shown[:LEAKED_SHOWN]
    ]
    return found


def nics_context(
    request: HtmxHttpRequest, params: QueryDict, *, parts: frozenset[str]
) -> tuple[dict[str, Any], int]:
    """What the page (or the fragments in `parts`) shows as `params` asks, and its status."""
    filters = _filters(request, params)
    context, status = dict(filters), 200
    if TABLE in parts:
        table, status = nic_table(request, filters)
        context.update(table)
    if ACTIVITY in parts:
        context.update(nic_activity(request, filters))
    return context, 400 if filters["errors"] else status


@require_GET
@list_page(NicListFilterSet)
def nic_list(request: HtmxHttpRequest) -> HttpResponse:
    parts = BOTH
    if request.htmx and not request.htmx.boosted:
        # A part reads only what it shows (the table when the target is none of them).
        target = request.htmx.target or ""
        parts = BOTH if target == "nic-body" else frozenset([target if target in BOTH else TABLE])
    context, status = nics_context(request, request.GET, parts=parts)
    return page_or_fragment(request, TEMPLATE, context, fragments=FRAGMENTS, status=status)
