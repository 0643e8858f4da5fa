"""The filters of the lists of clusters, their machines and the VMs: related
objects by id (`cluster=3`) or by name (`cluster__name=prod`), as every list takes them
(capvco_web.filters.RelationFilterSet)."""

from __future__ import annotations

from django.db.models import QuerySet

from capvco_web.filters import IdFilter, RelationFilterSet, TrueFalseFilter
from cloud.models import VirtualMachine
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.orphans import vms_not_ours


class VirtualMachineFilterSet(RelationFilterSet):
    relations = {"location": "location", "account": "location__account"}
    orphaned = TrueFalseFilter(method="filter_orphaned", label="Orphaned (no machine owns it)")
    not_ours = TrueFalseFilter(
        method="filter_not_ours",
        label="Made outside the control plane (not named by us, held by no machine)",
    )
    vm_id = IdFilter(field_name="vm_id", label="The VM's whitesky id")

    class Meta:
        model = VirtualMachine
        fields = ["cloudspace_id", "orphaned", "not_ours", "vm_id"]

    def filter_not_ours(
        self, queryset: QuerySet[VirtualMachine], name: str, value: bool | None
    ) -> QuerySet[VirtualMachine]:
        if value is None:
            return queryset
        foreign = vms_not_ours(queryset)
        return foreign if value else queryset.exclude(pk__in=foreign.values("pk"))

    def filter_orphaned(
        self, queryset: QuerySet[VirtualMachine], name: str, value: bool | None
    ) -> QuerySet[VirtualMachine]:
        if value is None:
            return queryset
        return queryset.filter(orphaned_since__isnull=not value)


class ClusterFilterSet(RelationFilterSet):
    relations = {"account": "account"}

    class Meta:
        model = Cluster
        fields = ["state"]


class ClusterSiteFilterSet(RelationFilterSet):
    relations = {"cluster": "cluster", "location": "location", "account": "cluster__account"}

    class Meta:
        model = ClusterSite
        fields: list[str] = []


class MachinePoolFilterSet(RelationFilterSet):
    relations = {
        "cluster": "cluster",
        "site": "site",
        "location": "site__location",
        "account": "cluster__account",
    }

    class Meta:
        model = MachinePool
        fields: list[str] = []


class MachineFilterSet(RelationFilterSet):
    relations = {
        "pool": "pool",
        "cluster": "pool__cluster",
        "site": "pool__site",
        "location": "pool__site__location",
        "account": "pool__cluster__account",
    }

    class Meta:
        model = Machine
        fields = ["phase"]
