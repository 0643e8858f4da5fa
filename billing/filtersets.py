"""The filters of the money lists, for the API and the dashboard alike, by the convention
every list follows (capvco_web.filters.RelationFilterSet): the costs' locations, the leak
ledger (its kind, how it ended, whether it is open, a name or id that contains a word) and
the idle GPU spells."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from billing.models import IdleSpell, Leak
from capvco_web.filters import IdFilter, RelationFilterSet, TrueFalseFilter
from cloud.models import Location

SEARCH_MIN_LENGTH = 3  # shorter words would match nearly every name


class CostFilterSet(RelationFilterSet):
    """What the costs cover: the locations of an account, or one location (every cost is
    of one location's prices)."""

    relations = {"account": "account"}
    location = IdFilter(field_name="pk", label="The location's id")
    location__name = django_filters.CharFilter(
        field_name="name", label="The location's name (every location of that name you see)"
    )

    class Meta:
        model = Location
        fields: list[str] = []


class LeakFilterSet(RelationFilterSet):
    relations = {"account": "account", "location": "location"}
    open = TrueFalseFilter(
        field_name="ended_at", lookup_expr="isnull", label="Still open (true) or ended (false)"
    )
    q = django_filters.CharFilter(
        method="filter_search",
        label="Name or id contains",
        min_length=SEARCH_MIN_LENGTH,
        max_length=200,
    )

    class Meta:
        model = Leak
        fields = ["kind", "end", "open", "q"]

    def filter_search(self, queryset: QuerySet[Leak], name: str, value: str) -> QuerySet[Leak]:
        if not value:
            return queryset
        return queryset.filter(Q(name__icontains=value) | Q(external_id__icontains=value))


class IdleSpellFilterSet(RelationFilterSet):
    relations = {"account": "account", "location": "location"}
    open = TrueFalseFilter(
        field_name="ended_at", lookup_expr="isnull", label="Still idle (true) or ended (false)"
    )
    # Ids kept as numbers, not foreign keys (a spell outlives its machine): declared as ids,
    # or the generated number filters would take 0.5 and 1e3.
    cluster_id = IdFilter(field_name="cluster_id", label="The cluster's id")
    pool_id = IdFilter(field_name="pool_id", label="The pool's id")
    machine_id = IdFilter(field_name="machine_id", label="The machine's id")

    class Meta:
        model = IdleSpell
        fields = ["cluster_id", "pool_id", "machine_id", "open"]
