"""The filters of the money endpoints: the costs' locations, and the leak ledger, by the
convention every list follows (capvco_web.filters.RelationFilterSet)."""

from __future__ import annotations

import django_filters

from billing.models import IdleSpell, Leak
from capvco_web.filters import IdFilter, RelationFilterSet, TrueFalseFilter
from cloud.models import Location


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

    class Meta:
        model = Leak
        fields = ["kind", "end", "open"]


class IdleSpellFilterSet(RelationFilterSet):
    relations = {"account": "account", "location": "location"}
    open = TrueFalseFilter(
        field_name="ended_at", lookup_expr="isnull", label="Still idle (true) or ended (false)"
    )

    class Meta:
        model = IdleSpell
        fields = ["cluster_id", "pool_id", "machine_id", "open"]
