from __future__ import annotations

import django_filters

from clusters.models import Machine


class MachineFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="pool__cluster__name")

    class Meta:
        model = Machine
        fields = ["cluster", "pool", "phase"]
