"""Writing observed state into mirror rows, touching only what changed.

A reconciler pass over unchanged data must write nothing; `fields_assign` is how each
mirror finds out whether a row changed at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models


def fields_assign(instance: models.Model, data: Mapping[str, Any]) -> list[str]:
    """Set the fields whose value differs; return their names (empty: nothing changed)."""
    changed = []
    for field, value in data.items():
        if getattr(instance, field) != value:
            setattr(instance, field, value)
            changed.append(field)
    return changed
