"""The audit log: who did what to which object and why, newest first, with links to the
objects that still exist, and each change as a diff a person reads (field: before → after).

What an audit record holds of a secret is already its mark ("(secret)", a size and a
digest), never its value (capvco_web.audit); the diff shows a field whose name says it is a
secret as that mark whatever the record holds, so an old or hand-written record cannot
show one here either."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from capvco_web.audit import SECRET_FIELDS, secret_mark
from capvco_web.filtersets import AuditEventFilterSet
from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import Sort
from capvco_web.models import AuditEvent
from capvco_web.permissions import visible
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from dashboard.filtersets import filled, filtered_page, list_page
from gpus.models import VgpuReservation

PAGE_SIZE = 50
NEWEST_FIRST = Sort("created_at", True, "newest first")


NONE_SHOWN = "(none)"


@dataclass(frozen=True)
class FieldChange:
    """One field of an event: what it was and what it became ("" for a side the record
    does not have: a create has no before, a delete no after)."""

    field: str
    before: str
    after: str
    has_before: bool
    has_after: bool


def _shown(key: str, value: Any) -> str:
    if key.lower() in SECRET_FIELDS and value not in (None, "", False):
        return str(secret_mark(key, value))
    if value is None or value == "":
        return NONE_SHOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_shown(key, item) for item in value) if value else "[]"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_shown(str(k), v)}" for k, v in value.items()) or "{}"
    return str(value)


def audit_diff(before: Any, after: Any) -> list[FieldChange]:
    """The fields an event changed, in the record's order: both sides when it has both
    (a field the same on both sides is left out), else the side it has."""
    old = before if isinstance(before, Mapping) else {}
    new = after if isinstance(after, Mapping) else {}
    if before is not None and not isinstance(before, Mapping):
        old = {"value": before}
    if after is not None and not isinstance(after, Mapping):
        new = {"value": after}
    keys = list(old) + [key for key in new if key not in old]
    changes = []
    for key in keys:
        if key in old and key in new and old[key] == new[key]:
            continue
        changes.append(
            FieldChange(
                field=str(key),
                before=_shown(str(key), old[key]) if key in old else "",
                after=_shown(str(key), new[key]) if key in new else "",
                has_before=key in old,
                has_after=key in new,
            )
        )
    return changes


@dataclass
class EventRow:
    event: AuditEvent
    link: str
    changes: list[FieldChange] = field(default_factory=list)


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
    found = filtered_page(filterset, params=request.GET, sort=NEWEST_FIRST, size=PAGE_SIZE)
    context["errors"] = found.errors
    if (page := found.page) is not None:
        links = _links(request, page.rows)
        context["page"] = page
        context["rows"] = [
            EventRow(e, links.get((e.object_type, e.object_id), ""), audit_diff(e.before, e.after))
            for e in page.rows
        ]
    return page_or_fragment(
        request, "dashboard/audit.html", context, fragments=["audit-table"], status=found.status
    )
