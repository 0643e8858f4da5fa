"""The audit log: who did what to which object and why, newest first, with links to the
objects that still exist."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from capvco_web.filtersets import AuditEventFilterSet
from capvco_web.htmx import HtmxHttpRequest
from capvco_web.models import AuditEvent
from capvco_web.permissions import visible
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from dashboard.filtersets import filled, list_page, unknown_parameters
from dashboard.pagination import CURSOR_PARAMS, BadCursor, Sort, keyset_page
from dashboard.views.common import page_or_fragment
from gpus.models import VgpuReservation

PAGE_SIZE = 50
NEWEST_FIRST = Sort("created_at", True, "newest first")


@dataclass
class EventRow:
    event: AuditEvent
    link: str


def _links(request: HtmxHttpRequest, events: list[AuditEvent]) -> dict[tuple[str, str], str]:
    """Where each event's object can be seen, for those that still exist: one query per
    kind of object on the page."""
    ids: dict[str, set[int]] = defaultdict(set)
    for event in events:
        if event.object_id.isdigit():
            ids[event.object_type].add(int(event.object_id))
    links: dict[tuple[str, str], str] = {}

    def cluster_url(cluster_id: int, anchor: str = "") -> str:
        return reverse("dashboard:cluster", args=[cluster_id]) + anchor

    if found := ids.get("clusters.Cluster"):
        clusters = visible(request.user, Cluster.objects.filter(pk__in=found))
        for pk in clusters.values_list("pk", flat=True):
            links["clusters.Cluster", str(pk)] = cluster_url(pk)
    if found := ids.get("clusters.ClusterSite"):
        sites = visible(request.user, ClusterSite.objects.filter(pk__in=found))
        for pk, cluster_id in sites.values_list("pk", "cluster_id"):
            links["clusters.ClusterSite", str(pk)] = cluster_url(cluster_id)
    if found := ids.get("clusters.MachinePool"):
        pools = visible(request.user, MachinePool.objects.filter(pk__in=found))
        for pk, cluster_id in pools.values_list("pk", "cluster_id"):
            links["clusters.MachinePool", str(pk)] = cluster_url(cluster_id, f"#pool-{pk}")
    if found := ids.get("clusters.Machine"):
        machines = visible(request.user, Machine.objects.filter(pk__in=found))
        for pk, cluster_id in machines.values_list("pk", "pool__cluster_id"):
            links["clusters.Machine", str(pk)] = cluster_url(cluster_id, f"#machine-{pk}")
    if found := ids.get("gpus.VgpuReservation"):
        rows = visible(request.user, VgpuReservation.objects.filter(pk__in=found))
        for pk, name in rows.values_list("pk", "name"):
            query = urlencode({"q": name})
            links["gpus.VgpuReservation", str(pk)] = f"{reverse('dashboard:reservations')}?{query}"
    return links


@require_GET
@list_page(AuditEventFilterSet)
def audit_list(request: HtmxHttpRequest) -> HttpResponse:
    filterset = AuditEventFilterSet(
        filled(request.GET),
        queryset=visible(request.user, AuditEvent.objects.all()),
        request=request,
    )
    context: dict[str, Any] = {
        "filterset": filterset,
        "params": request.GET,
        "page_url": request.get_full_path(),
        "errors": [],
        "rows": [],
        "page": None,
    }
    status = 200
    if unknown := unknown_parameters(request.GET, [*filterset.filters, *CURSOR_PARAMS]):
        context["errors"] = unknown
        status = 400
    elif not filterset.is_valid():
        for field, messages in filterset.form.errors.items():
            context["errors"] += [f"{field}: {message}" for message in messages]
        status = 400
    else:
        try:
            page = keyset_page(filterset.qs, sort=NEWEST_FIRST, params=request.GET, size=PAGE_SIZE)
        except BadCursor as exc:
            context["errors"].append(str(exc))
            status = 400
        else:
            links = _links(request, page.rows)
            context["page"] = page
            context["rows"] = [
                EventRow(e, links.get((e.object_type, e.object_id), "")) for e in page.rows
            ]
    return page_or_fragment(
        request, "dashboard/audit.html", context, fragments=["audit-table"], status=status
    )
