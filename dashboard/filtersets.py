"""The node list's filters: the API's node FilterSet, with the location and the flags the
page offers."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.http import QueryDict

from capvco_web.filters import IdFilter
from clusters.filtersets import KubeNodeFilterSet
from clusters.models import KubeNode
from dashboard.forms import NodeFilterForm


def filled(params: QueryDict) -> QueryDict:
    """`params` without the empty values a page's form sends for "any": the API's filters
    refuse an empty value, and a page means by it no filter."""
    given = QueryDict(mutable=True)
    for name, values in params.lists():
        if kept := [value for value in values if value != ""]:
            given.setlist(name, kept)
    return given


class NodeListFilterSet(KubeNodeFilterSet):
    location = IdFilter(field_name="machine__pool__site__location_id", label="Location")
    gpu_type = django_filters.CharFilter(
        method="_gpu_type",
        max_length=63,  # a label value's longest
        label="GPU type",
        help_text="The capvco.io/gpu-type label, e.g. nvidia-a100",
    )
    flag = django_filters.ChoiceFilter(
        choices=list(NodeFilterForm.FLAGS.items()), method="filter_flag", empty_label="any"
    )

    class Meta(KubeNodeFilterSet.Meta):
        form = NodeFilterForm
        fields = [*KubeNodeFilterSet.Meta.fields, "location", "flag"]

    def filter_flag(
        self, queryset: QuerySet[KubeNode], name: str, value: str
    ) -> QuerySet[KubeNode]:
        # The API's own filters say what each flag means.
        if value == NodeFilterForm.GPUS_MISSING:
            return self.filters["gpus_missing"].filter(queryset, True)
        if value == NodeFilterForm.UNOWNED:
            return self.filters["unowned"].filter(queryset, True)
        return queryset  # node-missing lists machines, not nodes (dashboard.views.nodes)
