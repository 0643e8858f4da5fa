"""Audit records: every destructive action writes one (who, what, why, before, after)."""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import models

from capvco_web.encryption import SECRET_KEPT as SECRET_KEPT
from capvco_web.encryption import EncryptedTextField
from capvco_web.models import AuditEvent
from capvco_web.ownership import account_id_of, account_path


class SystemActor(StrEnum):
    """The components that act on their own, on every account, under these names in the
    audit log. Only these skip the permission check: a plain string is no actor."""

    RECONCILER = "reconciler"
    ORPHAN_SWEEP = "orphan-sweep"
    CAPI_IMPORT = "capi-import"
    GPU_ADDON = "gpu-addon"
    ACCOUNT_CREATE = "account-create"
    HISTORY_PRUNE = "history-prune"
    SRIOV_AGENT = "sriov-agent"
    SRIOV_RECLAIM = "sriov-reclaim"
    SRIOV_INSTALLER = "sriov-installer"
    DEMO_SEED = "demo-seed"
    DEMO_SRIOV = "demo_sriov"
    NOTIFY = "notify"
    AUTOSCALER = "autoscaler"
    # A person's request carried out after that person's user was deleted.
    DELETED_USER = "deleted user"


def system_actor_check(actor: object) -> None:
    """Refuse a string that is not a SystemActor: a name typed anywhere would otherwise
    act on every account unchecked."""
    if isinstance(actor, str) and not isinstance(actor, SystemActor):
        raise TypeError(f"{actor!r} is no actor: name a SystemActor or pass the user.")


def audit_record(
    *,
    actor: User | AnonymousUser | SystemActor,
    action: str,
    obj: models.Model,
    reason: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    """Write an audit event. `actor` is a user, or the system component acting."""
    system_actor_check(actor)
    user = actor if isinstance(actor, User) else None
    account_id = account_id_of(obj) if account_path(type(obj)) else None
    return AuditEvent.objects.create(
        account_id=account_id,
        actor=user,
        actor_name=actor.value
        if isinstance(actor, SystemActor)
        else (user.get_username() if user else "anonymous"),
        action=action,
        object_type=obj._meta.label,
        object_id=str(obj.pk),
        object_repr=str(obj)[:255],
        reason=reason,
        before=before,
        after=after,
    )


# What an audit record says of a secret: never its value (SECRET_KEPT, or what its field
# shows of it: a URL's scheme and host).
SECRET_CHANGED = "(secret, changed)"  # noqa: S105


# Fields that hold a credential, whatever a record says of them: only their mark is shown
# (the dashboard's audit pages and /api/v1/audit/), so an old or hand-written record cannot
# show one either.
SECRET_FIELDS = frozenset(
    {"credential", "kubeconfig", "capi_kubeconfig", "password", "secret", "token", "jwt"}
)


def secret_mark(key: str, value: Any) -> Any:
    """`value` as a record may show it under `key`: a secret's own mark ("(secret)", a
    digest) or SECRET_KEPT in place of anything else a secret field holds."""
    if key.lower() not in SECRET_FIELDS or value in (None, "", False):
        return value
    text = str(value)
    return text if text.startswith("(") and text.endswith(")") else SECRET_KEPT


def audit_masked(side: Any) -> Any:
    """One side of a record (before or after) with every secret field's value its mark,
    at any depth."""
    if isinstance(side, dict):
        return {
            key: secret_mark(str(key), value)
            if str(key).lower() in SECRET_FIELDS
            else audit_masked(value)
            for key, value in side.items()
        }
    if isinstance(side, list):
        return [audit_masked(item) for item in side]
    return side


def text_digest(text: str, what: str) -> str:
    """`(user data, 1.2 KiB, sha256 3a7bd3e2360a3d29)`: enough to tell two versions apart
    and to check one against a copy, without the text itself in every audit record."""
    data = text.encode()
    size = f"{len(data) / 1024:.1f} KiB" if len(data) >= 1024 else f"{len(data)} B"
    return f"({what}, {size}, sha256 {hashlib.sha256(data).hexdigest()[:16]})"


def _recorded(obj: models.Model, field: models.Field[Any, Any]) -> Any:
    if isinstance(field, EncryptedTextField):
        value = getattr(obj, field.attname)
        return field.shown(value) if value else ""
    if field.name in getattr(obj, "audit_digested", ()):
        text = getattr(obj, field.attname)
        return text_digest(text, str(field.verbose_name)) if text else ""
    if field.is_relation:
        related = getattr(obj, field.name)
        return None if related is None else str(related)
    value = field.value_from_object(obj)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return field.value_to_string(obj)  # decimals, durations, dates: as the admin shows them


def _audited_fields(obj: models.Model) -> list[models.Field[Any, Any]]:
    # Secrets are not editable in forms (they are write-only), but people set them.
    return [
        field
        for field in obj._meta.concrete_fields
        if (field.editable or isinstance(field, EncryptedTextField)) and not field.primary_key
    ]


def audit_snapshot(obj: models.Model) -> dict[str, Any]:
    """The fields a person sets, as an audit record shows them (a secret as "(secret)")."""
    return {field.name: _recorded(obj, field) for field in _audited_fields(obj)}


def audit_changes(
    stored: models.Model, changed: models.Model
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Before and after of the fields that differ between the stored row and the changed
    one. A secret that changed reads "(secret)" → "(secret, changed)", a secret URL whose
    shown part stayed "https://host/…" → "https://host/… (changed)"."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for field in _audited_fields(changed):
        if getattr(stored, field.attname) == getattr(changed, field.attname):
            continue
        before[field.name] = _recorded(stored, field)
        after[field.name] = _recorded(changed, field)
        if isinstance(field, EncryptedTextField) and getattr(changed, field.attname):
            if after[field.name] == SECRET_KEPT:
                after[field.name] = SECRET_CHANGED
            elif after[field.name] == before[field.name]:
                after[field.name] += " (changed)"
    return before, after
