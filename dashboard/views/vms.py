"""Every VM listed in the clusters' cloudspaces, ours or not: held by a machine, orphaned
(named by us, no machine owns it: since when and why), or made outside the control plane;
with what it costs per hour (the API's figure), filtered by the API's own filters
(`clusters.filtersets.VirtualMachineFilterSet`): the page of `/api/v1/vms/`; the columns
shown are the operator's choice (`cols`)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import Sort
from capvco_web.permissions import allowed, visible
from cloud.models import Location, VirtualMachine
from clusters.filtersets import VirtualMachineFilterSet
from clusters.models import Machine
from clusters.orphans import vms_not_ours
from dashboard.columns import COLUMNS, columns_chosen
from dashboard.filtersets import filled, filtered_page, list_page
from dashboard.forms import LocationChoiceField
from dashboard.lists import VM_COLUMNS
from dashboard.views.saved import saved_views_context
from gpus.models import vm_hourly_cost

PAGE_SIZE = 50
NEWEST_FIRST = Sort("first_seen_at", True, "newest first")


@dataclass(frozen=True)
class VmRow:
    vm: VirtualMachine
    machine: Machine | None  # the machine that holds it
    not_ours: bool  # made outside the control plane
    hourly: Decimal  # what its vCPUs and memory cost per hour (the API's hourly_cost)
    may_remove: bool


@require_GET
@list_page(VirtualMachineFilterSet)
def vm_list(request: HtmxHttpRequest) -> HttpResponse:
    chosen = columns_chosen(request.GET, VM_COLUMNS)
    vms = visible(request.user, VirtualMachine.objects.all())
    # The account is read for the location column only.
    joined = "location__account" if "location" in chosen.keys else "location"
    filterset = VirtualMachineFilterSet(
        filled(request.GET), queryset=vms.select_related(joined), request=request
    )
    filterset.form.fields["location"] = LocationChoiceField(
        visible(request.user, Location.objects.order_by("name")), required=False
    )
    context: dict[str, Any] = {
        "filterset": filterset,
        "chosen": chosen,
        "shown": chosen.keys,
        "params": request.GET,
        "page_url": request.get_full_path(),
        "list_url": reverse("dashboard:vms"),
        "errors": [],
        "rows": [],
        "page": None,
        **saved_views_context(request, "vms", request.GET),
    }
    found = filtered_page(
        filterset, params=request.GET, sort=NEWEST_FIRST, size=PAGE_SIZE, takes=[COLUMNS]
    )
    context["errors"] = chosen.errors or found.errors
    if (page := found.page) is not None and not chosen.errors:
        rows = list(page.rows)
        # Who holds each, and which were made outside: one query each for the page.
        held = {
            (m.pool.site.location_id, m.vm_id): m
            for m in Machine.objects.filter(vm_id__in={vm.vm_id for vm in rows})
            .select_related("pool__cluster", "pool__site")
            .order_by("pk")
        }
        foreign = set(
            vms_not_ours(VirtualMachine.objects.filter(pk__in=[vm.pk for vm in rows])).values_list(
                "pk", flat=True
            )
        )
        context["page"] = page
        context["rows"] = [
            VmRow(
                vm,
                machine := held.get((vm.location_id, vm.vm_id)),
                vm.pk in foreign,
                vm_hourly_cost(vm),
                may_remove=machine is None
                and (vm.orphaned_since is not None or vm.pk in foreign)
                and allowed(
                    request.user,
                    "cloud.remove_foreign_virtualmachine"
                    if vm.pk in foreign
                    else "cloud.remove_virtualmachine",
                    vm,
                ),
            )
            for vm in rows
        ]
    return page_or_fragment(
        request,
        "dashboard/vms.html",
        context,
        fragments=["vm-table"],
        status=400 if chosen.errors else found.status,
    )
