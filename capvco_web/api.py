"""Shared pieces of the REST API."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.db.models import ProtectedError, RestrictedError
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class ModelCleanMixin(serializers.ModelSerializer):  # type: ignore[type-arg]
    """Runs the model's own validation (`full_clean`), so the API refuses exactly what the
    model and the admin refuse, with the error on the field that caused it.

    `error_paths` renames model fields to the API's (nested) field names.
    """

    error_paths: Mapping[str, tuple[str, ...]] = {}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if self.instance is None:
            model: type[models.Model] = self.Meta.model
            instance = model(**attrs)
        else:
            instance = copy.copy(self.instance)  # the real one changes only on save()
            for field, value in attrs.items():
                setattr(instance, field, value)
        try:
            instance.full_clean(validate_unique=False)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(self._nest(exc.message_dict)) from exc
        return attrs

    def _nest(self, errors: dict[str, list[str]]) -> dict[str, Any]:
        nested: dict[str, Any] = {}
        for field, messages in errors.items():
            path = self.error_paths.get(field, (field,))
            target = nested
            for key in path[:-1]:
                target = target.setdefault(key, {})
            target[path[-1]] = messages
        return nested


class ReasonSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Every destructive call says why; the reason goes into the audit record."""

    reason = serializers.CharField(max_length=1000, trim_whitespace=True)


class InUseConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Still in use."
    default_code = "in_use"


class ConflictSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A 409: what is in the way, and what to do about it."""

    detail = serializers.CharField()


def in_use_detail(exc: ProtectedError | RestrictedError) -> str:
    """What a refused delete says. The services' refusals name what is in the way and
    what to do; Django's own (a foreign key met on a path no service guards) name the
    rows that hold on."""
    if type(exc) not in (ProtectedError, RestrictedError):
        return str(exc)
    objs = exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
    names = sorted(f"{o._meta.verbose_name} {o}" for o in objs)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"Still in use by {shown}: delete or tear down those first."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler; a delete refused because something still hangs from the object
    answers 409 naming it, and a model's own refusal at save answers 400 (never a 500)."""
    if isinstance(exc, ProtectedError | RestrictedError):
        exc = InUseConflict(in_use_detail(exc))
    if isinstance(exc, DjangoValidationError):  # a model's check at save (e.g. under a lock)
        exc = serializers.ValidationError(getattr(exc, "message_dict", None) or exc.messages)
    return drf_exception_handler(exc, context)
