"""Audit records: every destructive action writes one (who, what, why, before, after)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import models

from capvco_web.models import AuditEvent


def audit_record(
    *,
    actor: User | AnonymousUser | str,
    action: str,
    obj: models.Model,
    reason: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    """Write an audit event. `actor` is a user, or the name of the system component acting."""
    user = actor if isinstance(actor, User) else None
    return AuditEvent.objects.create(
        actor=user,
        actor_name=actor
        if isinstance(actor, str)
        else (user.get_username() if user else "anonymous"),
        action=action,
        object_type=obj._meta.label,
        object_id=str(obj.pk),
        object_repr=str(obj)[:255],
        reason=reason,
        before=before,
        after=after,
    )
