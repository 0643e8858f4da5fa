"""Filters shared by the API and the dashboard lists: one convention for related objects
(RelationFilterSet), strict about their values, and an id that matches nothing answers an
empty list (not a 400, as a choice of existing rows would): also one past the 64 bits a
database's integer holds, which never reaches the database (SQLite cannot take it)."""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, ClassVar

import django_filters
from django import forms
from django.db.models import Model, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

_INTEGER = re.compile(r"-?[0-9]+")
# The ids a database can hold: 64-bit integers (PostgreSQL's bigint, SQLite's INTEGER).
ID_MIN, ID_MAX = -(2**63), 2**63 - 1
# `cluster__name=prod`: a related object by its name.
NAME_SUFFIX = "__name"


class IdField(forms.Field):
    widget = forms.NumberInput
    default_error_messages = {"invalid": "Give an id (a whole number)."}

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        if not isinstance(value, str) or not _INTEGER.fullmatch(value):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        sign, digits = (-1, value[1:]) if value.startswith("-") else (1, value)
        digits = digits.lstrip("0") or "0"
        # Past any id a database holds (StrictFilterSet matches nothing), however many
        # digits it has: not read whole (Python refuses to read over 4,300).
        return sign * (ID_MAX + 1 if len(digits) > 19 else int(digits))


class TrueFalseField(forms.Field):
    # In a page's form: "any" sends nothing (a page leaves empty parameters out).
    widget = forms.Select(choices=[("", "any"), ("true", "yes"), ("false", "no")])
    default_error_messages = {"invalid": "Give true or false."}

    def to_python(self, value: Any) -> bool | None:
        if value in self.empty_values:
            return None
        if value not in ("true", "false"):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return bool(value == "true")


@extend_schema_field(OpenApiTypes.INT)
class IdFilter(django_filters.Filter):
    """Rows whose foreign key (or id) is this id; none when nothing has it."""

    field_class = IdField


@extend_schema_field(OpenApiTypes.BOOL)
class TrueFalseFilter(django_filters.Filter):
    """`true` or `false`, nothing else (not `yes`, `1` or `maybe`, read as no filter)."""

    field_class = TrueFalseField


class StrictFilterSet(django_filters.FilterSet):
    """A filter set that refuses (400) a parameter given twice, and an empty value where a
    string is not what the parameter takes, instead of silently filtering by one of them
    or by nothing."""

    def get_form_class(self) -> type[forms.Form]:
        filters = self.filters

        class StrictForm(super().get_form_class()):  # type: ignore[misc]
            def clean(self) -> dict[str, Any]:
                cleaned: dict[str, Any] = super().clean()
                for name, given in filters.items():
                    values = self.data.getlist(name) if hasattr(self.data, "getlist") else []
                    if len(values) > 1:
                        self.add_error(name, "Give this parameter once.")
                    elif values == [""] and not isinstance(given, django_filters.CharFilter):
                        self.add_error(name, "Give a value, or leave the parameter out.")
                return cleaned

        return StrictForm

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        for name, value in self.form.cleaned_data.items():
            past = isinstance(value, int) and not ID_MIN <= value <= ID_MAX
            if past and isinstance(self.filters.get(name), IdFilter):
                return queryset.none()  # no row has that id, however it is filtered
        return super().filter_queryset(queryset)


def _related_model(model: type[Model], path: str) -> type[Model]:
    """The model at the end of `path` (`pool__cluster`) from `model`."""
    for part in path.split("__"):
        related = model._meta.get_field(part).related_model
        assert isinstance(related, type), f"{model.__name__}.{part} is no relation"
        model = related
    return model


class RelationFilterSet(StrictFilterSet):
    """The one filter language of every list, in the API and on the dashboard: a related
    object is filtered by its id under its own name (`cluster=3`, `location=2`, `pool=`,
    `account=`), and by its name under `<name>__name` (`cluster__name=prod`; names are
    unique per account only, so a name picks every such object the caller sees).

    `relations` names each related object a list can be filtered by, with its path from
    the list's model (`{"cluster": "pool__cluster"}`); the filters are made from it. A
    filter declared under one of those names (a relation no foreign key makes) is kept.
    """

    relations: ClassVar[dict[str, str]] = {}

    @classmethod
    def get_filters(cls) -> OrderedDict[str, django_filters.Filter]:
        filters = super().get_filters()
        model = cls._meta.model  # type: ignore[attr-defined]
        for name, path in cls.relations.items():
            said = name.replace("_", " ")
            if name not in cls.declared_filters:
                filters[name] = IdFilter(field_name=f"{path}_id", label=f"The {said}'s id")
            by_name = f"{name}{NAME_SUFFIX}"
            has_name = any(f.name == "name" for f in _related_model(model, path)._meta.fields)
            if by_name not in cls.declared_filters and has_name:
                filters[by_name] = django_filters.CharFilter(
                    field_name=f"{path}__name",
                    label=f"The {said}'s name (every {said} of that name you see)",
                )
        return filters
