from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from capvco_web.filters import IdFilter, StrictFilterSet, TrueFalseFilter
from gpus.models import GpuProfile, VgpuReservation


class GpuProfileFilterSet(StrictFilterSet):
    location = IdFilter(field_name="location_id")

    class Meta:
        model = GpuProfile
        fields = ["location", "vendor"]


class VgpuReservationFilterSet(StrictFilterSet):
    location = IdFilter(field_name="location_id")
    orphaned = TrueFalseFilter(method="filter_orphaned")
    cluster = django_filters.CharFilter(field_name="owner_cluster")

    class Meta:
        model = VgpuReservation
        fields = ["location", "state", "cluster", "orphaned"]

    def filter_orphaned(
        self, queryset: QuerySet[VgpuReservation], name: str, value: bool | None
    ) -> QuerySet[VgpuReservation]:
        if value is None:
            return queryset
        return queryset.filter(orphaned_since__isnull=not value)
