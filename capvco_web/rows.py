"""Writing rows so that a pass over unchanged data writes nothing, and state changes are
compare-and-set.

`fields_assign` tells a mirror whether an observed row changed at all; `model_update`
writes a change to one row, only when the row is still in the state the caller saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models
from django.utils import timezone


def fields_assign(instance: models.Model, data: Mapping[str, Any]) -> list[str]:
    """Set the fields whose value differs; return their names (empty: nothing changed)."""
    changed = []
    for field, value in data.items():
        if getattr(instance, field) != value:
            setattr(instance, field, value)
            changed.append(field)
    return changed


def model_update(
    instance: models.Model, data: Mapping[str, Any], *, expect: Mapping[str, Any] | None = None
) -> bool:
    """Write the fields of `data` that differ from `instance`; True when the row was written.

    With `expect`, the row is written only while the database still holds those values
    (compare-and-set: two workers claiming one row, one wins). Nothing differs: no write,
    False. The instance takes the new values only when the write happened. `auto_now`
    fields (e.g. `updated_at`) move with every write, as `save()` would move them.
    """
    changed = {field: value for field, value in data.items() if getattr(instance, field) != value}
    if not changed:
        return False
    model = type(instance)
    for model_field in model._meta.concrete_fields:
        if getattr(model_field, "auto_now", False) and model_field.name not in changed:
            changed[model_field.name] = timezone.now()
    written = model._default_manager.filter(pk=instance.pk, **(expect or {})).update(**changed)
    if written:
        for name, value in changed.items():
            setattr(instance, name, value)
    return written == 1
