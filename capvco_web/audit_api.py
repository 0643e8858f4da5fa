"""/api/v1/audit/: the audit log, read only, as the dashboard's audit page and an object's
History show it: who did what to which object, why, and each side of the change, with a
field whose name says it is a secret shown as its mark only. Filtered as the page is
(`capvco_web.filtersets.AuditEventFilterSet`: actor, action prefix, object type and id,
object name, since, until); keyset pages in id order, so that a collector can follow the
log with its `next` link."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, viewsets

from capvco_web.api import KnownParametersMixin
from capvco_web.api_input import CursorPagination
from capvco_web.audit import audit_masked
from capvco_web.filtersets import AuditEventFilterSet
from capvco_web.models import AuditEvent
from capvco_web.permissions import AccountScopedViewSetMixin


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    before = serializers.SerializerMethodField(help_text="The fields before, as recorded.")
    after = serializers.SerializerMethodField(help_text="The fields after, as recorded.")

    class Meta:
        model = AuditEvent
        fields = [
            "id", "created_at", "actor_name", "action", "object_type", "object_id",
            "object_repr", "account", "reason", "before", "after",
        ]  # fmt: skip

    def get_before(self, event: AuditEvent) -> Any:
        return audit_masked(event.before)

    def get_after(self, event: AuditEvent) -> Any:
        return audit_masked(event.after)


class AuditEventViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[AuditEvent]
):
    """The audit log of the accounts you see (a superuser's: every event), in id order."""

    queryset = AuditEvent.objects.order_by("pk")
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet
    pagination_class = CursorPagination
