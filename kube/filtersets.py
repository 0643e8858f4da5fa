"""The filters of the lists of the Kubernetes mirror: related objects by id (`cluster=3`)
or by name (`cluster__name=prod`), as every list takes them
(capvco_web.filters.RelationFilterSet)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from capvco_web.filters import RelationFilterSet, TrueFalseFilter
from capvco_web.integrations.kube import GPU_TYPE_LABEL
from kube.models import KubeNode, KubePod


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
