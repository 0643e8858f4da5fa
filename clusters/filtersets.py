from __future__ import annotations

import django_filters

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

    class Meta:
        model = KubeNode
        fields = ["cluster", "machine", "ready", "unowned"]


class KubePodFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    node = django_filters.CharFilter(field_name="node_name")

    class Meta:
        model = KubePod
        fields = ["cluster", "namespace", "node", "phase"]
