from django.contrib import admin

from capvco_web.models import AuditEvent, Heartbeat


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    """Read-only: the audit trail is written by the code, never edited."""

    list_display = ["created_at", "actor_name", "action", "object_type", "object_repr"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_repr", "reason", "actor_name"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Heartbeat)
class HeartbeatAdmin(admin.ModelAdmin[Heartbeat]):
    list_display = ["name", "ticked_at"]
