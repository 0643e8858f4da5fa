"""Which account each object belongs to: the one fact tenancy (capvco_web.permissions) and
the audit log (capvco_web.audit) both need. No Django REST Framework in here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models

# How each model reaches its account ("pk": it is the account), by model label; each app
# registers its own models from its AppConfig.ready() (`account_paths_register`).
ACCOUNT_PATHS: dict[str, str] = {}


def account_paths_register(paths: Mapping[type[models.Model], str]) -> None:
    ACCOUNT_PATHS.update({model._meta.label_lower: path for model, path in paths.items()})


def account_path(model: type[models.Model]) -> str | None:
    return ACCOUNT_PATHS.get(model._meta.label_lower)


def account_id_of(obj: models.Model) -> int | None:
    """The account `obj` belongs to; None while it belongs to none yet."""
    path = account_path(type(obj))
    if path is None:
        raise TypeError(f"{obj._meta.label} belongs to no account (see ACCOUNT_PATHS)")
    if path == "pk":
        return obj.pk  # type: ignore[no-any-return]
    *hops, last = path.split("__")
    target: Any = obj
    for hop in hops:
        if getattr(target, f"{hop}_id", None) is None:
            return None
        target = getattr(target, hop)
    return getattr(target, f"{last}_id")  # type: ignore[no-any-return]
