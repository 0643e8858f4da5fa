"""The filters of the lists of clusters, their machines, their Kubernetes and the VMs: related
objects by id (`cluster=3`) or by name (`cluster__name=prod`), as every list takes them
(capvco_web.filters.RelationFilterSet)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from capvco_web.filters import IdFilter, RelationFilterSet, TrueFalseFilter
from capvco_web.integrations.kube import GPU_TYPE_LABEL
from cloud.models import VirtualMachine
from clusters.models import Cluster, ClusterSite, KubeNode, KubePod, Machine, MachinePool
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


class KubeNodeFilterSet(RelationFilterSet):
    relations = {
        "cluster": "cluster",
        "machine": "machine",
        "pool": "machine__pool",
        "location": "machine__pool__site__location",
        "account": "cluster__account",
    }
    ready = TrueFalseFilter(field_name="ready")
    unowned = TrueFalseFilter(field_name="unowned_since", lookup_expr="isnull", exclude=True)
    gpus_missing = TrueFalseFilter(field_name="gpus_missing")
    gpu_type = django_filters.CharFilter(
        method="_gpu_type",
        label="GPU type",
        help_text="Its capvco.io/gpu-type label, e.g. nvidia-a100",
    )

    class Meta:
        model = KubeNode
        fields = ["ready", "unowned", "gpus_missing", "gpu_type"]

    def _gpu_type(self, queryset: QuerySet[KubeNode], name: str, value: str) -> QuerySet[KubeNode]:
        return queryset.filter(**{f"labels__{GPU_TYPE_LABEL}": value}) if value else queryset


class KubePodFilterSet(RelationFilterSet):
    relations = {"cluster": "cluster", "account": "cluster__account"}

    class Meta:
        model = KubePod
        fields = ["namespace", "node_name", "phase"]
