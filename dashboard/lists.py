"""The lists whose shape an operator chooses and saves: each with its filter language
(the API's FilterSet), its orders and its columns, read by its page and by the saved
views (dashboard.saved_views), which are checked against it."""

from __future__ import annotations

from dataclasses import dataclass

import django_filters
from django.http import QueryDict

from capvco_web.keyset import CURSOR_PARAMS, Sort
from clusters.filtersets import VirtualMachineFilterSet
from dashboard.columns import COLUMNS, Column, columns_chosen
from dashboard.filtersets import (
    ClusterListFilterSet,
    NodeListFilterSet,
    filled,
    unknown_parameters,
)
from gpus.filtersets import VgpuReservationFilterSet

RESERVATION_SORTS = {
    "-created": Sort("created_at", True, "newest first"),
    "created": Sort("created_at", False, "oldest first"),
    "name": Sort("name", False, "name, A to Z"),
    "-name": Sort("name", True, "name, Z to A"),
}
# The page's columns, each with the CSV's columns it stands for (the id always goes).
RESERVATION_COLUMNS = (
    Column("name", "Name", ("name", "vgpu_id")),
    Column("location", "Location", ("location",)),
    Column("gpu", "GPU", ("gpu_type", "card")),
    Column("state", "State", ("state", "released_at", "release_requested_by", "release_reason")),
    Column("vm", "VM", ("vm_id",)),
    Column("owner", "Owner", ("cluster", "pool", "machine")),
    Column("since", "Since", ("created_at", "first_seen_at")),
    Column("orphaned", "Orphaned", ("unassigned_since", "orphaned_since")),
    Column("per_hour", "Per hour", ("currency", "cost_per_hour"), numeric=True),
    Column("accrued", "Accrued", ("currency", "accrued_cost"), numeric=True),
)
VM_COLUMNS = (
    Column("name", "VM", ("name",)),
    Column("vm_id", "Id", ("vm_id",), numeric=True),
    Column("location", "Location", ("location", "account")),
    Column("cloudspace", "Cloudspace", ("cloudspace_id",)),
    Column("status", "Status", ("status",)),
    Column("vcpus", "vCPUs", ("vcpus",), numeric=True),
    Column("memory", "Memory MiB", ("memory_mib",), numeric=True),
    Column(
        "whose",
        "Whose",
        ("whose", "cluster", "pool", "machine", "orphaned_since", "orphan_reason"),
    ),
    Column("per_hour", "Per hour", ("currency", "hourly_cost"), numeric=True),
)
CLUSTER_COLUMNS = (
    Column("name", "Cluster", ("name",)),
    Column("account", "Account", ("account",)),
    Column("state", "State", ("state",)),
    Column("locations", "Locations", ("locations",)),
    Column("pools", "Pools", ("pools",), numeric=True),
    Column("machines", "Machines", ("machines",), numeric=True),
    Column("running", "Running", ("running",), numeric=True),
    Column("failed", "Failed", ("failed",), numeric=True),
    Column("gpus", "GPUs held", ("gpus_held",), numeric=True),
    Column("nodes", "Nodes Ready", ("nodes_ready", "nodes", "kube_flags"), numeric=True),
    Column("gpu_allocatable", "GPUs allocatable", ("gpu_allocatable",), numeric=True),
    Column("kubernetes", "Kubernetes", ("kube_observation", "kube_observation_problem")),
)
NODE_COLUMNS = (
    Column("cluster", "Cluster"),
    Column("name", "Node"),
    Column("gpu_type", "GPU type label"),
    Column("allocatable", "GPUs allocatable", numeric=True),
    Column("requested", "GPUs requested", numeric=True),
    Column("pods", "Pods using GPUs"),
    Column("verified", "A pod sees the GPUs"),
    Column("ready", "Ready"),
    Column("machine", "Machine"),
    Column("flags", "Flags"),
)
SORT = "sort"
PAGE = "page"  # a numbered page (the clusters list)


@dataclass(frozen=True)
class ShapedList:
    url_name: str
    filterset: type[django_filters.FilterSet]
    columns: tuple[Column, ...]
    sorts: dict[str, Sort]  # empty: one order

    def query_problems(
        self, params: QueryDict, filterset: django_filters.FilterSet | None = None
    ) -> list[str]:
        """What is wrong with `params` as this list's query (none: the list takes it):
        a parameter it does not take, a filter's refusal, an order or column it has not.
        The filters are checked by `filterset` where given (a page's, over what its user
        sees), else by the list's FilterSet on its own."""
        takes = [*self.filterset.base_filters, COLUMNS, *([SORT] if self.sorts else [])]
        if unknown := unknown_parameters(params, takes):
            return unknown
        problems = columns_chosen(params, self.columns).errors
        if (sort := params.get(SORT)) and sort not in self.sorts:
            problems.append(f"Unknown sort {sort!r}: use one of {', '.join(self.sorts)}.")
        if filterset is None:
            model = self.filterset._meta.model  # type: ignore[attr-defined]
            filterset = self.filterset(filled(params), queryset=model.objects.none())
        if not filterset.is_valid():
            problems += [
                f"{field}: {message}"
                for field, messages in filterset.form.errors.items()
                for message in messages
            ]
        return problems


LISTS = {
    "reservations": ShapedList(
        "dashboard:reservations", VgpuReservationFilterSet, RESERVATION_COLUMNS, RESERVATION_SORTS
    ),
    "vms": ShapedList("dashboard:vms", VirtualMachineFilterSet, VM_COLUMNS, {}),
    "clusters": ShapedList("dashboard:clusters", ClusterListFilterSet, CLUSTER_COLUMNS, {}),
    "nodes": ShapedList("dashboard:nodes", NodeListFilterSet, NODE_COLUMNS, {}),
}


def list_query(params: QueryDict) -> QueryDict:
    """A list's query as it is saved: less its page (a view opens at the first) and the
    empty values a form sends for "any"."""
    kept = filled(params)
    for name in (*CURSOR_PARAMS, PAGE):
        kept.pop(name, None)
    return kept
