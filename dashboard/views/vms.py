"""Every VM listed in the clusters' cloudspaces, ours or not: held by a machine, orphaned
(named by us, no machine owns it: since when and why), or made outside the control plane;
with what it costs per hour (the API's figure), filtered by the API's own filters
(`clusters.filtersets.VirtualMachineFilterSet`): the page of `/api/v1/vms/`; the columns
shown are the operator's choice (`cols`), and its CSV (`/vms/csv/`) has every VM the
filters select with those columns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse, QueryDict, StreamingHttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import Sort
from capvco_web.permissions import User, allowed, visible
from cloud.models import Location, VirtualMachine
from clusters.filtersets import VirtualMachineFilterSet
from clusters.models import Machine
from clusters.orphans import vms_not_ours
from dashboard.columns import COLUMNS, columns_chosen
from dashboard.csv_export import chunks, csv_refused, csv_response
from dashboard.filtersets import filled, filtered_page, list_page
from dashboard.forms import LocationChoiceField
from dashboard.lists import LISTS, VM_COLUMNS, list_query
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

    @property
    def whose(self) -> str:
        """Whose it is, as its Whose column says (and the CSV's `whose`)."""
        if self.machine is not None:
            return "machine"
        if self.vm.orphaned_since is not None:
            return "orphaned"
        return "not ours" if self.not_ours else "ours"


def vm_filterset(
    request: HtmxHttpRequest, params: QueryDict, shown: frozenset[str]
) -> VirtualMachineFilterSet:
    """The API's FilterSet over the VMs the user sees; the locations offered are theirs."""
    vms = visible(request.user, VirtualMachine.objects.all())
    # The account is read for the location column only.
    joined = "location__account" if "location" in shown else "location"
    filterset = VirtualMachineFilterSet(
        filled(params), queryset=vms.select_related(joined), request=request
    )
    filterset.form.fields["location"] = LocationChoiceField(
        visible(request.user, Location.objects.order_by("name")), required=False
    )
    return filterset


def vm_rows(user: User, vms: list[VirtualMachine], *, whose: bool = True) -> list[VmRow]:
    """The rows of `vms` (a page, or a chunk of the CSV): who holds each and which were
    made outside the control plane, one query each for them all (neither without `whose`:
    a CSV without its Whose column, which offers no removal either)."""
    held: dict[tuple[int, int | None], Machine] = {}
    foreign: set[int] = set()
    if whose:
        machines = Machine.objects.filter(vm_id__in={vm.vm_id for vm in vms})
        held = {
            (m.pool.site.location_id, m.vm_id): m
            for m in machines.select_related("pool__cluster", "pool__site").order_by("pk")
        }
        listed = VirtualMachine.objects.filter(pk__in=[vm.pk for vm in vms])
        foreign = set(vms_not_ours(listed).values_list("pk", flat=True))
    return [
        VmRow(
            vm,
            machine := held.get((vm.location_id, vm.vm_id)),
            vm.pk in foreign,
            vm_hourly_cost(vm),
            may_remove=whose
            and machine is None
            and (vm.orphaned_since is not None or vm.pk in foreign)
            and allowed(
                user,
                "cloud.remove_foreign_virtualmachine"
                if vm.pk in foreign
                else "cloud.remove_virtualmachine",
                vm,
            ),
        )
        for vm in vms
    ]


@require_GET
@list_page(VirtualMachineFilterSet)
def vm_list(request: HtmxHttpRequest) -> HttpResponse:
    chosen = columns_chosen(request.GET, VM_COLUMNS)
    filterset = vm_filterset(request, request.GET, chosen.keys)
    context: dict[str, Any] = {
        "filterset": filterset,
        "chosen": chosen,
        "shown": chosen.keys,
        "params": request.GET,
        "page_url": request.get_full_path(),
        "list_url": reverse("dashboard:vms"),
        "csv_query": list_query(request.GET).urlencode(),
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
        context["page"] = page
        context["rows"] = vm_rows(request.user, list(page.rows))
    return page_or_fragment(
        request,
        "dashboard/vms.html",
        context,
        fragments=["vm-table"],
        status=400 if chosen.errors else found.status,
    )


# --- CSV --------------------------------------------------------------------------------

CSV_COLUMNS = [
    "id", "name", "vm_id", "location", "account", "cloudspace_id", "status", "vcpus",
    "memory_mib", "whose", "cluster", "pool", "machine", "orphaned_since", "orphan_reason",
    "currency", "hourly_cost",
]  # fmt: skip


def _csv_rows(
    user: User, vms: QuerySet[VirtualMachine], columns: list[str]
) -> Iterator[dict[str, object]]:
    for chunk in chunks(vms):
        for row in vm_rows(user, chunk, whose="whose" in columns):
            vm, machine = row.vm, row.machine
            yield dict(zip(CSV_COLUMNS, [
                vm.pk, vm.name, vm.vm_id, vm.location.name,
                vm.location.account.name if "account" in columns else "",  # read with it
                vm.cloudspace_id, vm.status, vm.vcpus, vm.memory_mib, row.whose,
                machine.pool.cluster.name if machine else "",
                machine.pool.name if machine else "",
                machine.name if machine else "",
                vm.orphaned_since, vm.orphan_reason, vm.location.currency, row.hourly,
            ], strict=True))  # fmt: skip


@require_GET
@list_page(VirtualMachineFilterSet)
def vm_csv(request: HtmxHttpRequest) -> HttpResponse | StreamingHttpResponse:
    """Every VM the filters select (not one page), newest first as on the page, as CSV,
    with the columns the page shows (`cols`)."""
    chosen = columns_chosen(request.GET, VM_COLUMNS)
    filterset = vm_filterset(request, request.GET, chosen.keys)
    if problems := LISTS["vms"].query_problems(request.GET, filterset):
        return csv_refused(problems)
    columns = chosen.csv(CSV_COLUMNS)
    vms = filterset.qs.order_by(*NEWEST_FIRST.order())
    return csv_response("vms", columns, _csv_rows(request.user, vms, columns))
