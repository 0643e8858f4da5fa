"""Shared pieces of the REST API."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from rest_framework import serializers


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
