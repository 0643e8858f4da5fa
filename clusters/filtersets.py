from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from capvco_web.integrations.kube import GPU_TYPE_LABEL
from clusters.models import KubeNode, KubePod, Machine


class MachineFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="pool__cluster__name")

    class Meta:
        model = Machine
        fields = ["cluster", "pool", "phase"]


class KubeNodeFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    unowned = django_filters.BooleanFilter(
        field_name="unowned_since", lookup_expr="isnull", exclude=True
    )

    gpu_type = django_filters.CharFilter(
        method="_gpu_type", help_text="Its capvco.io/gpu-type label, e.g. nvidia-a100"
    )

    class Meta:
        model = KubeNode
        fields = ["cluster", "machine", "ready", "unowned", "gpus_missing", "gpu_type"]

    def _gpu_type(self, queryset: QuerySet[KubeNode], name: str, value: str) -> QuerySet[KubeNode]:
        return queryset.filter(**{f"labels__{GPU_TYPE_LABEL}": value})


class KubePodFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    node = django_filters.CharFilter(field_name="node_name")

    class Meta:
        model = KubePod
        fields = ["cluster", "namespace", "node", "phase"]
