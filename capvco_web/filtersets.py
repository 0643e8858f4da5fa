"""The filters of the audit log: its account by id or `__name`, as every list takes it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField

from capvco_web.filters import RelationFilterSet
from capvco_web.models import AuditEvent
from capvco_web.validators import is_date_text


class DateTimeTextField(IsoDateTimeField):
    """ISO 8601, the whole text of it (is_date_text): a NUL after a date is refused, not
    read as that date. Taken in UTC: an offset Python reads but PostgreSQL does not (past
    ±15:59) is converted, not sent."""

    def to_python(self, value: Any) -> datetime | None:
        if isinstance(value, str) and not is_date_text(value):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        moment: datetime | None = super().to_python(value)
        if moment is None or moment.tzinfo is None:
            return moment
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(
                "This moment is out of range once taken in UTC.", code="invalid"
            ) from None


class DateTimeTextFilter(django_filters.IsoDateTimeFilter):
    field_class = DateTimeTextField


class AuditEventFilterSet(RelationFilterSet):
    relations = {"account": "account"}
    actor = django_filters.CharFilter(
        field_name="actor_name", lookup_expr="iexact", label="Actor", help_text="a user name"
    )
    action = django_filters.CharFilter(
        lookup_expr="startswith",
        label="Action",
        help_text='e.g. "vgpu.release_requested", or "vgpu." for all of them',
    )
    object_type = django_filters.CharFilter(
        label="Object type", help_text='e.g. "clusters.Machine"'
    )
    object_id = django_filters.CharFilter(label="Object id")
    object = django_filters.CharFilter(
        field_name="object_repr", lookup_expr="icontains", label="Object name contains"
    )
    since = DateTimeTextFilter(field_name="created_at", lookup_expr="gte", label="Since")
    until = DateTimeTextFilter(field_name="created_at", lookup_expr="lt", label="Until")

    class Meta:
        model = AuditEvent
        fields = ["actor", "action", "object_type", "object_id", "object", "since", "until"]
