"""The OpenAPI schema of the API, saying what it really does (drf-spectacular)."""

from __future__ import annotations

import copy
import re
from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from capvco_web.api import (
    NO_NUL,
    DurationTextField,
    ErrorSerializer,
    KnownParametersMixin,
    StrictInputMixin,
    stripped_text_pattern,
)
from capvco_web.validators import VisibleText

_ERRORS = {
    "400": "Invalid input: `fields` names each problem (or `detail`, for a body that is not "
    "JSON or a query parameter out of range). A query parameter the operation does not take "
    "is refused, not ignored: `unknown_parameters` names it, `allowed` says what it takes.",
    "401": "Not authenticated: no credentials, or credentials that are not valid.",
    "403": "Authenticated, but not allowed: your role in the object's account does not allow "
    "this action (or no role allows it), a token may not do it, or the CSRF token of a "
    "session is missing.",
    "404": "No such object, or one of an account you are not a member of.",
    "406": "The `Accept` header names no media type this operation answers in (JSON; CSV "
    "where the operation offers it).",
    "409": "Valid in itself, but not against what is there now: an object it names does "
    "not exist, a name is taken, or objects it names do not belong together (`fields` "
    "names each).",
    "413": "The body is larger than the API reads (2.5 MB by default, "
    "DATA_UPLOAD_MAX_MEMORY_SIZE).",
    "415": "The body is not `application/json`.",
    "429": "Too many requests: try again after `Retry-After` seconds.",
}
_ERROR_HEADERS = {
    "401": {"WWW-Authenticate": "How to authenticate."},
    "429": {"Retry-After": "Seconds to wait before trying again."},
}


class ApiSchema(AutoSchema):
    """drf-spectacular's schema, saying what the API really does: the error statuses of
    every operation (in the one error shape), the reason body a DELETE takes, unknown
    request fields and query parameters refused, and NUL characters refused in strings."""

    _direction = "response"  # of the serializer being mapped

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        parameters = operation.get("parameters", [])
        filterset = getattr(self.view, "filterset_class", None)
        filters = filterset.base_filters if filterset is not None else {}
        for parameter in parameters:
            schema = parameter["schema"]
            plain = not {"enum", "pattern", "format"} & set(schema)
            if parameter["in"] == "query" and schema.get("type") == "string" and plain:
                schema["pattern"] = _text_filter_pattern(filters.get(parameter["name"]))
        places = {parameter["in"] for parameter in parameters}
        # Every operation needs authentication and negotiates what it answers in.
        statuses = {"401", "403", "406", "429"}
        if "requestBody" in operation:
            statuses |= {"400", "413", "415"}
        if "requestBody" in operation and self.method != "DELETE":
            statuses.add("409")
        if "query" in places or isinstance(self.view, KnownParametersMixin):
            statuses.add("400")  # a value it does not take, or a parameter it does not know
        if "path" in places:
            statuses.add("404")
        responses = operation["responses"]
        for code in sorted(statuses - set(responses)):
            responses[code] = self._get_response_for_code(
                OpenApiResponse(ErrorSerializer, description=_ERRORS[code]), code
            )
            # Errors are JSON, also where the operation answers CSV (capvco_web.api_csv).
            content = responses[code].get("content", {})
            responses[code]["content"] = {
                media: body for media, body in content.items() if media == "application/json"
            }
            if code in _ERROR_HEADERS:
                responses[code]["headers"] = {
                    name: {"schema": {"type": "string"}, "description": description}
                    for name, description in _ERROR_HEADERS[code].items()
                }
        return operation

    def _get_request_body(self, direction: str = "request") -> dict[str, Any] | None:
        # OpenAPI lets a DELETE have a body; drf-spectacular documents one only for
        # POST, PUT and PATCH. Ours take the reason that goes into the audit record.
        if self.method != "DELETE" or not self._has_own_request():
            return super()._get_request_body(direction)  # type: ignore[no-any-return]
        self.method = "POST"
        try:
            return super()._get_request_body(direction)  # type: ignore[no-any-return]
        finally:
            self.method = "DELETE"

    def _has_own_request(self) -> bool:
        """Whether the operation declares a request body of its own (extend_schema)."""
        declared = self.get_request_serializer()
        return declared is not None and type(force_instance(declared)) is not type(
            force_instance(self._get_serializer())
        )

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        self._direction = direction  # for _insert_field_validators, which is not told
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        serializer = force_instance(serializer)
        if direction == "request" and isinstance(serializer, StrictInputMixin):
            schema["additionalProperties"] = False
            schema.update(copy.deepcopy(serializer.schema_rules))
        if not type(serializer).__doc__:
            schema.pop("description", None)  # not the docstring of a base class
        return schema

    def _map_serializer_field(self, field: Any, direction: str, *args: Any) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_serializer_field(field, direction, *args)
        if isinstance(field, DurationTextField):
            schema["pattern"] = field.pattern
        if isinstance(field, serializers.DecimalField) and "pattern" in schema:
            # drf-spectacular writes the digits as `\d`: any decimal digit in Python
            # (`١٢`), ASCII ones only in ECMAScript. What we send has ASCII ones.
            schema["pattern"] = schema["pattern"].replace(r"\d", "[0-9]")
        return schema

    def _insert_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
        super()._insert_field_validators(field, schema)
        string = schema["oneOf"][0] if "oneOf" in schema else schema
        # A validator that states its rule itself (visible text, the allowed whitesky
        # hosts), for what is sent or what is answered.
        for validator in field.validators:
            if hasattr(validator, "json_schema"):
                string.update(validator.json_schema(self._direction))
            if isinstance(validator, VisibleText) and {"minLength", "maxLength"} & set(string):
                least, most = string.get("minLength", 0), string.get("maxLength")
                string["pattern"] = validator.schema_pattern(least, most)
        refuses_nul = any(isinstance(v, ProhibitNullCharactersValidator) for v in field.validators)
        if self._direction == "request" and refuses_nul and string.get("type") == "string":
            string.setdefault("pattern", NO_NUL)
        # drf-spectacular offers a blank string beside a pattern as `oneOf`; where the
        # pattern takes it too, "" would match both (and `oneOf` none).
        if "oneOf" in schema and schema["oneOf"][1] == _BLANK and _admits_blank(string):
            schema.update(schema.pop("oneOf")[0])
        # A default of "" belongs beside the `oneOf` it matches, not in the pattern's branch.
        if "oneOf" in schema and "default" in string:
            schema["default"] = string.pop("default")


_BLANK = {"type": "string", "maxLength": 0}


def _text_filter_pattern(given: Any) -> str:
    """What a text filter takes: its form field refuses NUL, and judges the length of what
    is left once stripped (e.g. a search of at least 3 characters)."""
    extra = getattr(given, "extra", {})
    if "min_length" in extra or "max_length" in extra:
        return stripped_text_pattern(max(extra.get("min_length") or 2, 2), extra["max_length"])
    return NO_NUL


def _admits_blank(schema: dict[str, Any]) -> bool:
    if schema.get("minLength", 0) or "format" in schema:
        return False
    try:
        return re.search(schema.get("pattern", ""), "") is not None
    except re.error:
        return False  # not a pattern Python reads: keep drf-spectacular's answer
