from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from capvco_web.filters import IdFilter, StrictFilterSet, TrueFalseFilter
from capvco_web.integrations.kube import GPU_TYPE_LABEL
from cloud.models import Cloudspace, Image, Location, Membership, VirtualMachine
from clusters.models import Cluster, ClusterSite, KubeNode, KubePod, Machine, MachinePool


class MembershipFilterSet(StrictFilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Membership
        fields = ["account"]


class CloudspaceFilterSet(StrictFilterSet):
    location = IdFilter(field_name="location_id")

    class Meta:
        model = Cloudspace
        fields = ["location"]


class VirtualMachineFilterSet(StrictFilterSet):
    location = IdFilter(field_name="location_id")
    orphaned = TrueFalseFilter(method="filter_orphaned", label="Orphaned (no machine owns it)")

    class Meta:
        model = VirtualMachine
        fields = ["location", "cloudspace_id", "orphaned"]

    def filter_orphaned(
        self, queryset: QuerySet[VirtualMachine], name: str, value: bool | None
    ) -> QuerySet[VirtualMachine]:
        if value is None:
            return queryset
        return queryset.filter(orphaned_since__isnull=not value)


class ImageFilterSet(StrictFilterSet):
    location = IdFilter(field_name="location_id")

    class Meta:
        model = Image
        fields = ["location"]


class LocationFilterSet(StrictFilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Location
        fields = ["account", "name"]


class ClusterFilterSet(StrictFilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Cluster
        fields = ["account", "state"]


class ClusterSiteFilterSet(StrictFilterSet):
    cluster = IdFilter(field_name="cluster_id")
    location = IdFilter(field_name="location_id")

    class Meta:
        model = ClusterSite
        fields = ["cluster", "location"]


class MachinePoolFilterSet(StrictFilterSet):
    cluster = IdFilter(field_name="cluster_id")
    site = IdFilter(field_name="site_id")

    class Meta:
        model = MachinePool
        fields = ["cluster", "site"]


class MachineFilterSet(StrictFilterSet):
    cluster = django_filters.CharFilter(field_name="pool__cluster__name")
    pool = IdFilter(field_name="pool_id")

    class Meta:
        model = Machine
        fields = ["cluster", "pool", "phase"]


class KubeNodeFilterSet(StrictFilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    machine = IdFilter(field_name="machine_id")
    ready = TrueFalseFilter(field_name="ready")
    unowned = TrueFalseFilter(field_name="unowned_since", lookup_expr="isnull", exclude=True)
    gpus_missing = TrueFalseFilter(field_name="gpus_missing")
    gpu_type = django_filters.CharFilter(
        method="_gpu_type", help_text="Its capvco.io/gpu-type label, e.g. nvidia-a100"
    )

    class Meta:
        model = KubeNode
        fields = ["cluster", "machine", "ready", "unowned", "gpus_missing", "gpu_type"]

    def _gpu_type(self, queryset: QuerySet[KubeNode], name: str, value: str) -> QuerySet[KubeNode]:
        return queryset.filter(**{f"labels__{GPU_TYPE_LABEL}": value})


class KubePodFilterSet(StrictFilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    node = django_filters.CharFilter(field_name="node_name")

    class Meta:
        model = KubePod
        fields = ["cluster", "namespace", "node", "phase"]
