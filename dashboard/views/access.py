"""Who sees what on the dashboard, and who may act: every queryset a page shows goes
through `visible`, every action through `may`, so that one place decides.

For now strictly: a superuser sees and does everything; any other user sees nothing (the
lists are empty, a detail page is not found) and is refused every action (403). Roles per
account will answer here.
"""

from __future__ import annotations

from typing import TypeVar

from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

M = TypeVar("M", bound=models.Model)


def _superuser(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_authenticated and user.is_active and user.is_superuser)


def visible(request: HttpRequest, queryset: QuerySet[M]) -> QuerySet[M]:
    """The rows of `queryset` that the user may see."""
    return queryset if _superuser(request) else queryset.none()


def may(request: HttpRequest, perm: str, obj: models.Model) -> bool:
    """Whether the user may do `perm` (e.g. `clusters.scale_machinepool`) to `obj`."""
    return _superuser(request)


def may_or_refuse(request: HttpRequest, perm: str, obj: models.Model) -> None:
    if not may(request, perm, obj):
        raise PermissionDenied(f"You may not do this to {obj._meta.verbose_name} {obj}.")
