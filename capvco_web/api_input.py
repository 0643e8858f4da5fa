"""What the API reads besides bodies' fields: JSON only, bounded in depth, and pages
bounded in size. Kept apart from capvco_web.api, which imports DRF's views: DRF's
settings import these classes while its views are being defined."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import Model, QuerySet
from django.http import QueryDict
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.pagination import BasePagination, LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils import json
from rest_framework.utils.urls import remove_query_param, replace_query_param

from capvco_web.keyset import AFTER, BEFORE, BadCursor, KeysetPage, Sort, keyset_page

# A request body nested deeper than this is refused.
MAX_JSON_DEPTH = 32


def _depth(value: Any) -> int:
    """How deeply `value` nests lists and objects, without recursing."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend(
                (child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


class JSONParser(parsers.JSONParser):
    """DRF's parser, refusing (400) bodies that are not UTF-8, are nested absurdly deep or
    carry NaN/Infinity, instead of failing on them (500)."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=json.strict_constant)
        except UnicodeDecodeError as exc:
            raise ParseError("The request body is not UTF-8.") from exc
        except RecursionError as exc:
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.") from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        if _depth(data) > MAX_JSON_DEPTH:
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
        return data


MAX_PAGE_SIZE = 1000
MAX_OFFSET = 10**18
_WHOLE_NUMBER = re.compile(r"[0-9]+")


LIMIT_DESCRIPTION = (
    f"Number of results to return per page (1 to {MAX_PAGE_SIZE}; more is read as {MAX_PAGE_SIZE})."
)


def query_parameter_once(request: Request, name: str) -> str | None:
    """The parameter's value, or None; given twice: refused (400) naming it."""
    given = request.query_params.getlist(name)
    if len(given) > 1:
        raise ApiValidationError({name: ["Give this parameter once."]})
    return given[0] if given else None


def _whole_number(request: Request, name: str, *, least: int, most: int) -> int | None:
    """The parameter, read as at most `most` (however many digits it has)."""
    raw = query_parameter_once(request, name)
    if raw is None:
        return None
    value = None
    if _WHOLE_NUMBER.fullmatch(raw):
        digits = raw.lstrip("0") or "0"
        value = most if len(digits) > len(str(most)) else min(int(digits), most)
    if value is None or value < least:
        raise ApiValidationError({name: [f"Give a whole number of at least {least}."]})
    return value


class Pagination(LimitOffsetPagination):
    """`?limit` and `?offset` are whole numbers or refused (400); a limit above the
    largest page size is read as that size. For the small lists: the big ones page by
    cursor (CursorPagination)."""

    max_limit = MAX_PAGE_SIZE
    limit_query_description = LIMIT_DESCRIPTION

    def get_limit(self, request: Request) -> int | None:
        limit = _whole_number(request, self.limit_query_param, least=1, most=MAX_PAGE_SIZE)
        return self.default_limit if limit is None else limit

    def get_offset(self, request: Request) -> int:
        # Any offset past the last row answers an empty page, however large.
        return _whole_number(request, self.offset_query_param, least=0, most=MAX_OFFSET) or 0

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        least = {self.limit_query_param: 1, self.offset_query_param: 0}
        for parameter in parameters:
            parameter["schema"]["minimum"] = least[parameter["name"]]
        return parameters


# A cursor list counts its rows up to this many; past it `count` says this many and
# `count_capped` is true: counting all would read all, on every page.
CURSOR_COUNT_CAP = 10_000
# Oldest first: the primary key is unique and indexed on every table, so a deep page is
# an index range scan from the cursor, whatever the filters.
CURSOR_SORT = Sort("id", descending=False, label="oldest first")
# The opaque cursor is the keyset cursor after a letter saying which way it reads.
_NEXT, _PREVIOUS = "n", "p"
CURSOR_PATTERN = f"^[{_NEXT}{_PREVIOUS}][A-Za-z0-9_-]+$"


class CursorPagination(BasePagination):
    """Keyset pages for the big lists, in id order: `?cursor` is the opaque value of a
    `next` or `previous` link (a made-up one is refused, 400 naming it), `?limit` the page
    size. A deep page costs what the first does. `?offset` is no parameter of these lists:
    refused (400) naming it, as any unknown parameter is."""

    cursor_query_param = "cursor"
    limit_query_param = "limit"

    def paginate_queryset(
        self, queryset: QuerySet[Any] | Sequence[Any], request: Request, view: Any = None
    ) -> list[Any]:
        size = _whole_number(request, self.limit_query_param, least=1, most=MAX_PAGE_SIZE)
        if not isinstance(queryset, QuerySet):
            raise TypeError("cursor pages are of a queryset")
        params = QueryDict(mutable=True)
        given = query_parameter_once(request, self.cursor_query_param)
        cursor = given or ""
        way, keyset = cursor[:1], cursor[1:]
        # An empty `cursor=` is no cursor we made (the first page has none): refused, as
        # the schema's pattern says.
        if given is not None and (way not in (_NEXT, _PREVIOUS) or not keyset):
            raise ApiValidationError({self.cursor_query_param: [BAD_CURSOR]})
        if cursor:
            params[AFTER if way == _NEXT else BEFORE] = keyset
        try:
            self.page: KeysetPage[Model] = keyset_page(
                queryset,
                sort=CURSOR_SORT,
                params=params,
                size=size or api_settings.PAGE_SIZE or MAX_PAGE_SIZE,
                count_cap=CURSOR_COUNT_CAP,
            )
        except BadCursor as exc:
            raise ApiValidationError({self.cursor_query_param: [BAD_CURSOR]}) from exc
        self.request = request
        return self.page.rows

    def _link(self, way: str, keyset: str) -> str | None:
        if not keyset:
            return None
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.cursor_query_param, way + keyset)

    def get_paginated_response(self, data: Any) -> Response:
        page = self.page
        previous = self._link(_PREVIOUS, page.previous_cursor)
        if previous is None and page.has_previous and not page.rows:
            # Past the last row: back to the first page.
            previous = remove_query_param(
                self.request.build_absolute_uri(), self.cursor_query_param
            )
        return Response(
            {
                "count": min(page.count, CURSOR_COUNT_CAP),
                "count_capped": page.count_capped,
                "next": self._link(_NEXT, page.next_cursor),
                "previous": previous,
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["count", "count_capped", "next", "previous", "results"],
            "properties": {
                "count": {
                    "type": "integer",
                    "description": f"The rows of the list (filtered), counted up to "
                    f"{CURSOR_COUNT_CAP:,}: past that, {CURSOR_COUNT_CAP:,} and "
                    "`count_capped` is true.",
                    "example": 123,
                },
                "count_capped": {
                    "type": "boolean",
                    "description": f"Whether the list has more than {CURSOR_COUNT_CAP:,} rows.",
                },
                "next": {
                    "type": "string",
                    "nullable": True,
                    "format": "uri",
                    "description": "The next page (null on the last).",
                },
                "previous": {
                    "type": "string",
                    "nullable": True,
                    "format": "uri",
                    "description": "The previous page (null on the first).",
                },
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "The page: the opaque value in a `next` or `previous` "
                "link (none for the first page). Rows are in id order, oldest first.",
                "schema": {"type": "string", "pattern": CURSOR_PATTERN},
            },
            {
                "name": self.limit_query_param,
                "required": False,
                "in": "query",
                "description": LIMIT_DESCRIPTION,
                "schema": {"type": "integer", "minimum": 1},
            },
        ]


BAD_CURSOR = (
    "Not a cursor of this list: give the value in a `next` or `previous` link, or none "
    "for the first page."
)
