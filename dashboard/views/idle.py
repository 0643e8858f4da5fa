"""GPUs idle now and before: each GPU node whose attached vGPUs no pending or running pod
asks for (`billing.IdleSpell`, opened by the money pass from a complete Kubernetes
observation), with since when, its pool and what the idle GPUs cost so far, filtered by
the API's own filters (`billing.filtersets.IdleSpellFilterSet`)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.http import HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing.filtersets import IdleSpellFilterSet
from billing.models import IdleSpell
from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import Sort
from capvco_web.permissions import visible
from cloud.models import Location
from clusters.models import Cluster, MachinePool
from dashboard.filtersets import filled, filtered_page, list_page
from dashboard.forms import LocationChoiceField

PAGE_SIZE = 50
NEWEST_FIRST = Sort("since", True, "newest first")


@dataclass(frozen=True)
class IdleRow:
    spell: IdleSpell
    pool: str  # its name; "" when the pool is gone
    cluster_exists: bool
    cost: Decimal  # since it began, to its end or now


@require_GET
@list_page(IdleSpellFilterSet)
def idle_gpu_list(request: HtmxHttpRequest) -> HttpResponse:
    spells = visible(request.user, IdleSpell.objects.all())
    filterset = IdleSpellFilterSet(
        filled(request.GET), queryset=spells.select_related("location", "account"), request=request
    )
    filterset.form.fields["location"] = LocationChoiceField(
        visible(request.user, Location.objects.order_by("name")), required=False
    )
    now = timezone.now()
    context: dict[str, Any] = {
        "filterset": filterset,
        "params": request.GET,
        "page_url": request.get_full_path(),
        "list_url": reverse("dashboard:idle-gpus"),
        "errors": [],
        "rows": [],
        "page": None,
        "now": now,
    }
    found = filtered_page(filterset, params=request.GET, sort=NEWEST_FIRST, size=PAGE_SIZE)
    context["errors"] = found.errors
    if (page := found.page) is not None:
        rows = list(page.rows)
        # A spell keeps its cluster's name and its pool's id: the pools by name, and the
        # clusters still there to link to, in one query each.
        pools = dict(
            MachinePool.objects.filter(pk__in={s.pool_id for s in rows}).values_list("pk", "name")
        )
        clusters = set(
            Cluster.objects.filter(pk__in={s.cluster_id for s in rows}).values_list("pk", flat=True)
        )
        context["page"] = page
        context["rows"] = [
            IdleRow(
                spell,
                pools.get(spell.pool_id, ""),
                spell.cluster_id in clusters,
                spell.cost(until=now).quantize(Decimal("0.01")),
            )
            for spell in rows
        ]
    return page_or_fragment(
        request, "dashboard/idle_gpus.html", context, fragments=["idle-table"], status=found.status
    )
