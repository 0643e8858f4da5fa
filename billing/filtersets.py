"""The filters of the leak ledger: its account and location by id or `__name` (the one
filter language of every list, capvco_web.filters.RelationFilterSet), its kind, whether it
is still open, and a name or id that contains a word."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from billing.models import Leak
from capvco_web.filters import RelationFilterSet, TrueFalseFilter

SEARCH_MIN_LENGTH = 3  # shorter words would match nearly every name


class LeakFilterSet(RelationFilterSet):
    relations = {"account": "account", "location": "location"}
    kind = django_filters.ChoiceFilter(choices=Leak.Kind.choices, empty_label="any")
    open = TrueFalseFilter(method="filter_open", label="Still open (not ended)")
    q = django_filters.CharFilter(
        method="filter_search",
        label="Name or id contains",
        min_length=SEARCH_MIN_LENGTH,
        max_length=200,
    )

    class Meta:
        model = Leak
        fields = ["kind", "open", "q"]

    def filter_open(
        self, queryset: QuerySet[Leak], name: str, value: bool | None
    ) -> QuerySet[Leak]:
        if value is None:
            return queryset
        return queryset.filter(ended_at__isnull=value)

    def filter_search(self, queryset: QuerySet[Leak], name: str, value: str) -> QuerySet[Leak]:
        if not value:
            return queryset
        return queryset.filter(Q(name__icontains=value) | Q(external_id__icontains=value))
