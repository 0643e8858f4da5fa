from __future__ import annotations

from django.conf import settings
from django.db import models


class Heartbeat(models.Model):
    """When a periodic signal (the beat tick) was last seen running on a worker."""

    name = models.CharField(max_length=64, unique=True)
    ticked_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.ticked_at:%Y-%m-%d %H:%M:%S}"


class AuditEvent(models.Model):
    """Who did what to which object, why, and how it looked before and after."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(
        max_length=150, help_text="The user, or the system component that acted."
    )
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=128)
    object_repr = models.CharField(max_length=255)
    reason = models.TextField(blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.object_type} {self.object_repr}"
