"""What every endpoint of the REST API shares: the one error shape (and the 409 of what
conflicts with the database), and serializers that take input exactly as documented.
Bodies and pages: capvco_web.api_input; the schema: capvco_web.api_schema."""

from __future__ import annotations

import copy
import logging
import re
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

from django.apps import apps
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.db import IntegrityError, models
from django.db.models import ProtectedError, RestrictedError
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, ErrorDetail, MethodNotAllowed
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils import humanize_datetime
from rest_framework.views import exception_handler as drf_exception_handler

from capvco_web.auth import is_api_path
from capvco_web.middleware import database_unavailable, is_database_unavailable
from capvco_web.validators import is_date_text

logger = logging.getLogger(__name__)


class ErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Every error the API answers (4xx) has this shape."""

    detail = serializers.CharField(help_text="What went wrong and, where it helps, what to do.")
    code = serializers.CharField(
        help_text="Stable and machine-readable: invalid, parse_error, not_authenticated, "
        "authentication_failed, permission_denied, not_found, method_not_allowed, "
        "unsupported_media_type, in_use, release_refused, throttled, ..."
    )

    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]
        fields = super().get_fields()
        # Declared here: a class attribute named `fields` would hide Serializer.fields.
        fields["fields"] = serializers.DictField(
            required=False,
            help_text="Invalid input only: the messages per field, nested as in the request "
            "body (`non_field_errors` for the request as a whole), or per query parameter.",
        )
        fields["unknown_parameters"] = serializers.ListField(
            child=serializers.CharField(),
            required=False,
            help_text="Query parameters the operation does not take (refused, not ignored: "
            "a misspelt filter would list everything).",
        )
        fields["allowed"] = serializers.ListField(
            child=serializers.CharField(),
            required=False,
            help_text="With `unknown_parameters`: the query parameters it takes.",
        )
        return fields


def _field_messages(errors: Any, path: str = "") -> list[str]:
    """`gpu.type: message` for every message in DRF's nested validation errors."""
    if isinstance(errors, Mapping):
        return [
            line
            for key, value in errors.items()
            for line in _field_messages(
                value, path if key == "non_field_errors" else f"{path}.{key}".lstrip(".")
            )
        ]
    if isinstance(errors, list):
        if all(isinstance(item, str) for item in errors):
            return [f"{path}: {message}" if path else str(message) for message in errors]
        return [
            line
            for index, item in enumerate(errors)
            for line in _field_messages(item, f"{path}[{index}]")
        ]
    return [f"{path}: {errors}" if path else str(errors)]


# Refusals of a request that is valid in itself but not against what the database holds
# now: an object named that does not exist, a name taken, objects that do not belong
# together. They answer 409, not 400: the same request may succeed another time.
STATE_CODES = frozenset({"does_not_exist", "unique", "conflict"})


def _leaf_codes(codes: Any) -> set[str]:
    if isinstance(codes, Mapping):
        return {code for value in codes.values() for code in _leaf_codes(value)}
    if isinstance(codes, list):
        return {code for value in codes for code in _leaf_codes(value)}
    return {str(codes)}


def is_state_conflict(exc: ApiValidationError) -> bool:
    return _leaf_codes(exc.get_codes()) <= STATE_CODES


def error_body(exc: APIException, data: Any) -> dict[str, Any]:
    """DRF's error data in the one shape: `detail`, `code`, and for invalid input `fields`."""
    if isinstance(exc, ApiValidationError):
        fields = data if isinstance(data, Mapping) else {"non_field_errors": data}
        lines = _field_messages(fields)
        conflict = is_state_conflict(exc)
        said = "; ".join(line.rstrip(".") for line in lines) + "."
        detail = ("Conflict: " if conflict else "Invalid input: ") + said
        return {"detail": detail, "code": "conflict" if conflict else "invalid", "fields": fields}
    detail = data.get("detail", "") if isinstance(data, Mapping) else data
    code = detail.code if isinstance(detail, ErrorDetail) else exc.default_code
    return {"detail": str(detail), "code": code}


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self) -> None:
        most = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        super().__init__(f"The request body is larger than the API reads: at most {most:,} bytes.")


class InUseConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Still in use."
    default_code = "in_use"


class Refused(APIException):
    """409: valid, but it cannot happen as things stand; the detail says why and what to
    do instead, the code which refusal it is (`release_refused`, `removal_refused`)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "refused"


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


def api_validation_error(
    exc: DjangoValidationError, paths: Mapping[str, tuple[str, ...]] | None = None
) -> ApiValidationError:
    """A model's or a service's refusal as the API's, with its codes (a `conflict` answers
    409), each field's messages under its API name (`paths`: model field to nested path)."""
    if not hasattr(exc, "error_dict"):
        return ApiValidationError(
            [ErrorDetail(m, code=e.code or "invalid") for e in exc.error_list for m in e.messages]
        )
    nested: dict[str, Any] = {}
    for field, errors in exc.error_dict.items():
        path = (paths or {}).get(field, (field,))
        target = nested
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = [
            ErrorDetail(message, code=error.code or "invalid")
            for error in errors
            for message in error.messages
        ]
    return ApiValidationError(nested)


# What PostgreSQL and SQLite say of a row that breaks a unique constraint: the table and
# its columns.
_PG_KEY = re.compile(r"Key \((?P<columns>[^)]+)\)=")
_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (?P<columns>[\w., ]+)")
_UNIQUE_VIOLATION = "23505"  # PostgreSQL's SQLSTATE


def _unique_violated(exc: IntegrityError) -> tuple[type[models.Model], list[str]] | None:
    """The model and columns of the unique constraint a write broke; None for any other
    integrity error."""
    cause = exc.__cause__
    diag = getattr(cause, "diag", None)
    if diag is not None and getattr(cause, "sqlstate", None) == _UNIQUE_VIOLATION:
        table, found = diag.table_name, _PG_KEY.match(diag.message_detail or "")
        columns = [c.strip() for c in found["columns"].split(",")] if found else []
    elif found := _SQLITE_UNIQUE.match(str(exc)):
        pairs = [c.strip().split(".") for c in found["columns"].split(",")]
        table, columns = pairs[0][0], [pair[-1] for pair in pairs]
    else:
        return None
    model = next((m for m in apps.get_models() if m._meta.db_table == table), None)
    return (model, columns) if model is not None and columns else None


def unique_conflict(exc: IntegrityError) -> ApiValidationError | None:
    """A create that lost a race to an identical one: both passed the serializer's unique
    check before either was saved, and the second broke the constraint. The same 409 as
    that check gives one request after the other, naming the field (several: the request
    as a whole), with the model's own message."""
    violated = _unique_violated(exc)
    if violated is None:
        return None
    model, columns = violated
    by_column = {field.column: field for field in model._meta.concrete_fields}
    if not set(columns) <= set(by_column):
        return None
    check = tuple(by_column[column].name for column in columns)
    message = model().unique_error_message(model, check).messages[0]
    key = check[0] if len(check) == 1 else "non_field_errors"
    return ApiValidationError({key: [ErrorDetail(message, code="unique")]})


class UnknownParameters(ApiValidationError):
    """Query parameters an operation does not read: refused (400), each named."""

    def __init__(self, unknown: list[str], allowed: list[str]) -> None:
        takes = ", ".join(allowed)
        super().__init__(
            {name: [f"Unknown query parameter: this operation takes {takes}."] for name in unknown}
        )
        self.unknown, self.allowed = unknown, allowed


def known_parameters(view: Any, request: Request) -> list[str]:
    """The query parameters the view reads for this request: `format` always; a list's
    filters (its FilterSet), its `query_parameters`, pagination, search and ordering
    besides."""
    known = [api_settings.URL_FORMAT_OVERRIDE]
    if request.method not in ("GET", "HEAD") or getattr(view, "detail", False):
        return known
    # Parameters a view reads besides its filters (a grouping), as its schema lists them.
    known += list(getattr(view, "query_parameters", ()))
    for backend in getattr(view, "filter_backends", ()):
        if issubclass(backend, DjangoFilterBackend):
            filterset = backend().get_filterset_class(view, None)
            known += list(filterset.base_filters) if filterset is not None else []
        known += [
            getattr(backend, p) for p in ("search_param", "ordering_param") if hasattr(backend, p)
        ]
    paginator = getattr(view, "paginator", None)
    if paginator is not None:
        known += [p["name"] for p in paginator.get_schema_operation_parameters(view)]
    return list(dict.fromkeys(known))


class KnownParametersMixin:
    """Every view of the API takes this first: a query parameter the request's operation
    does not read (a misspelt filter, `?clustr=`) is refused with a 400 naming it and the
    ones it takes, instead of being ignored and listing everything. Checked after
    authentication, so a caller without credentials still learns only that."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):  # type: ignore[attr-defined]
            # No operation to read parameters: the method is what is wrong (405).
            raise MethodNotAllowed(request.method or "")
        known = known_parameters(self, request)
        if unknown := sorted(set(request.query_params) - set(known)):
            raise UnknownParameters(unknown, known)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler in the one error shape; a delete refused because something still
    hangs from the object answers 409 naming it, and a model's own refusal at save (e.g.
    under a lock) answers as the serializer's would have (never a 500), as does a create
    that lost a race to an identical one (a unique constraint). A body larger than Django
    reads answers 413."""
    if isinstance(exc, ProtectedError | RestrictedError):
        exc = InUseConflict(in_use_detail(exc))
    if isinstance(exc, RequestDataTooBig):
        exc = BodyTooLarge()
    if isinstance(exc, DjangoValidationError):
        exc = api_validation_error(exc)
    if isinstance(exc, IntegrityError):
        exc = unique_conflict(exc) or exc
    response = drf_exception_handler(exc, context)
    if response is not None:
        api_exc = exc if isinstance(exc, APIException) else APIException()
        response.data = error_body(api_exc, response.data)
        if isinstance(exc, ApiValidationError) and is_state_conflict(exc):
            response.status_code = status.HTTP_409_CONFLICT
        if isinstance(exc, UnknownParameters):
            response.data.update(unknown_parameters=exc.unknown, allowed=exc.allowed)
        if response.status_code == status.HTTP_503_SERVICE_UNAVAILABLE:
            _try_again_later_log(context, response)
    return response


def _try_again_later_log(context: dict[str, Any], response: Response) -> None:
    """A 503 of ours says what is unavailable and when to ask again (a VM's queue busy,
    whitesky or a cluster's Kubernetes out of reach): a warning, never Django's "ERROR
    django.request", which is for what failed in our code."""
    request = context.get("request")
    logger.warning(
        "%s %s: 503 %s: %s",
        getattr(request, "method", "-"),
        getattr(request, "path", "-"),
        response.data.get("code", ""),
        response.data.get("detail", ""),
    )
    response._has_been_logged = True  # type: ignore[attr-defined]


# Serializers: what they take is what the schema says, nothing coerced or ignored.


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return "null"


def _expected_type(field: serializers.Field) -> tuple[str, tuple[type, ...]] | None:  # type: ignore[type-arg]
    """The JSON type a field takes (as the schema documents it), or None for any."""
    if isinstance(field, serializers.BooleanField):
        return "a boolean", (bool,)
    if isinstance(field, serializers.IntegerField | serializers.PrimaryKeyRelatedField):
        return "a whole number", (int,)
    if isinstance(field, serializers.SlugRelatedField):
        return "a string", (str,)
    if isinstance(field, serializers.FloatField | serializers.DecimalField):
        return "a number", (int, float, str)
    if isinstance(field, serializers.ListField | serializers.ListSerializer):
        return "an array", (list,)
    if isinstance(field, serializers.ManyRelatedField | serializers.MultipleChoiceField):
        return "an array", (list,)
    if isinstance(field, serializers.DictField | serializers.Serializer):
        return "an object", (Mapping,)
    if isinstance(field, serializers.JSONField):
        return None
    if isinstance(field, serializers.CharField | serializers.ChoiceField):
        return "a string", (str,)
    if isinstance(field, serializers.DurationField | serializers.DateTimeField):
        return "a string", (str,)
    if isinstance(field, serializers.DateField | serializers.TimeField):
        return "a string", (str,)
    return None


def _type_problem(field: serializers.Field, value: Any) -> str | None:  # type: ignore[type-arg]
    expected = _expected_type(field)
    if value is None or expected is None:
        return None  # null: the field says whether it takes one
    name, types = expected
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return None
    return f"Give {name}, not {_json_type(value)}."


class StrictInputMixin(serializers.Serializer):  # type: ignore[type-arg]
    """Refuses (400, naming them) fields the serializer does not take and values of
    another JSON type than documented, where DRF would ignore or coerce them (`"5"` for
    a number, `5` for a string, `"yes"` for a boolean).

    The schema says the same (`additionalProperties: false`, see ApiSchema), with
    `schema_rules`: JSON Schema keywords for rules that span several fields.
    """

    schema_rules: ClassVar[dict[str, Any]] = {}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            errors: dict[str, list[str]] = {}
            for name, value in data.items():
                field = self.fields.get(name)
                if field is None:
                    errors[name] = ["Unknown field."]
                elif field.read_only:
                    errors[name] = ["Read-only field: leave it out."]
                elif problem := _type_problem(field, value):
                    errors[name] = [problem]
            if errors:
                raise ApiValidationError(errors)
        return super().to_internal_value(data)


class ModelCleanMixin(StrictInputMixin, serializers.ModelSerializer):  # type: ignore[type-arg]
    """Runs the model's own validation (`full_clean`), so the API refuses exactly what the
    model and the admin refuse, with the error on the field that caused it.

    Strings are taken as given (not trimmed): the lengths the schema documents are the
    ones enforced, and the model's validators judge the characters.

    `error_paths` renames model fields to the API's (nested) field names.
    """

    error_paths: Mapping[str, tuple[str, ...]] = {}

    def build_standard_field(
        self, field_name: str, model_field: models.Field[Any, Any]
    ) -> tuple[type[serializers.Field], dict[str, Any]]:  # type: ignore[type-arg]
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        if issubclass(field_class, serializers.CharField):
            kwargs["trim_whitespace"] = False
        return field_class, kwargs

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
            raise api_validation_error(exc, self.error_paths) from exc
        return attrs


# DRF refuses NUL characters in every string (PostgreSQL cannot store them).
NO_NUL = "^[^\\u0000]*$"

# What str.strip() removes, spelled out: Python's `\s` and ECMAScript's (the schema's)
# differ, and the schema must say exactly what is refused.
WHITESPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# A string with something other than whitespace (and no NUL), as a pattern.
HAS_TEXT = rf"^[^\x00]*[^{WHITESPACE}\x00][^\x00]*$"


def stripped_text_pattern(least: int, most: int) -> str:
    """A pattern of text that, stripped of whitespace, is empty or `least` to `most`
    characters long (as a form field that strips reads it), with no NUL."""
    assert 2 <= least <= most
    space, edge = f"[{WHITESPACE}]*", f"[^{WHITESPACE}\\x00]"
    return rf"^{space}(?:{edge}[^\x00]{{{least - 2},{most - 2}}}{edge})?{space}$"


_reason_text = RegexValidator(
    HAS_TEXT,
    "Give a reason (not only spaces, no NUL characters).",
)


class ReasonField(serializers.CharField):
    """A reason for the audit record: at most 1,000 characters as sent, not only
    whitespace; stored trimmed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=1000, trim_whitespace=False, **kwargs)
        if not self.allow_blank:
            self.validators.append(_reason_text)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        value = super().run_validation(data)
        return value.strip() if isinstance(value, str) else value


class ReasonSerializer(StrictInputMixin):
    """Every destructive call says why; the reason goes into the audit record."""

    reason = ReasonField()


# Durations: written as the API answers them, so the schema's pattern is the whole rule.


def _one_to(most: int) -> str:
    """A pattern of the whole numbers 1 to `most` (at least 1), without leading zeros."""
    digits = str(most)
    shorter = ["[1-9]" + "[0-9]" * (length - 1) for length in range(1, len(digits))]
    below = [
        f"{digits[:i]}[{int(i == 0)}-{int(d) - 1}]" + "[0-9]" * (len(digits) - i - 1)
        for i, d in enumerate(digits)
        if int(d) > int(i == 0)
    ]
    return "(?:" + "|".join([*shorter, *below, digits]) + ")"


def duration_pattern(most: timedelta) -> str:
    """`[D ]HH:MM:SS[.ffffff]` from 0 to `most` (whole days), as a pattern."""
    days = most.days
    assert most == timedelta(days=days) and days > 1, "whole days, more than one"
    time = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?"
    return rf"^(?:(?:{_one_to(days - 1)} )?{time}|{days} 00:00:00(?:\.0{{1,6}})?)$"


class DurationTextField(serializers.DurationField):
    """A duration from 0 to `most`, written as the API answers it: `[D ]HH:MM:SS[.ffffff]`
    (`01:30:00`, `2 00:00:00`). Nothing else is read (no ISO 8601, no bare seconds): the
    schema's pattern (`pattern`, see ApiSchema) is the whole rule."""

    def __init__(self, *, most: timedelta, **kwargs: Any) -> None:
        self.pattern = duration_pattern(most)
        said = f"Give a duration as [D ]HH:MM:SS, from 00:00:00 to {most.days} 00:00:00."
        kwargs["error_messages"] = {"invalid": said, **kwargs.get("error_messages", {})}
        super().__init__(min_value=timedelta(0), max_value=most, **kwargs)

    def to_internal_value(self, value: Any) -> timedelta:
        if not isinstance(value, str) or not re.fullmatch(self.pattern, value):
            self.fail("invalid")
        return super().to_internal_value(value)


class DateTimeText(serializers.DateTimeField):
    """A date and time in ISO 8601, the whole text of it (is_date_text): a NUL or a line
    break after a date is refused, not read as that date."""

    def to_internal_value(self, value: Any) -> Any:
        if isinstance(value, str) and not is_date_text(value):
            formats = getattr(self, "input_formats", api_settings.DATETIME_INPUT_FORMATS)
            self.fail("invalid", format=humanize_datetime.datetime_formats(formats))
        return super().to_internal_value(value)


# Django's own answers under /api/ (no such URL; a crash) in the one error shape too.


def _api_not_found() -> JsonResponse:
    return JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)


@csrf_exempt  # it changes nothing, whatever the method
@login_not_required
def api_not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """The last route under /api: a path no endpoint has answers the API's 404 in its error
    shape, with DEBUG on too (Django's debug 404 page is HTML). A path lacking only its
    trailing slash is sent to it, as APPEND_SLASH would."""
    if not request.path_info.endswith("/"):
        try:
            match = resolve(request.path_info + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
    return _api_not_found()


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_path(request.path_info):
        return _api_not_found()
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500 handler, called while the exception is being handled: the database
    unreachable (met in a middleware, e.g. reading the session) answers its 503."""
    exc = sys.exc_info()[1]
    if exc is not None and is_database_unavailable(exc):
        return database_unavailable(request, exc)
    if is_api_path(request.path_info):
        body = {"detail": "A server error occurred.", "code": "error"}
        return JsonResponse(body, status=500)
    return defaults.server_error(request)
