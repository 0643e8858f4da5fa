"""What the API reads besides bodies' fields: JSON only, bounded in depth, and pages
bounded in size. Kept apart from capvco_web.api, which imports DRF's views: DRF's
settings import these classes while its views are being defined."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.utils import json

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


class Pagination(LimitOffsetPagination):
    """`?limit` and `?offset` are whole numbers or refused (400); a limit above the
    largest page size is read as that size."""

    max_limit = MAX_PAGE_SIZE
    limit_query_description = (
        f"Number of results to return per page (1 to {MAX_PAGE_SIZE}; more is read as "
        f"{MAX_PAGE_SIZE})."
    )

    def _param(self, request: Request, name: str, *, least: int, most: int) -> int | None:
        """The parameter, read as at most `most` (however many digits it has)."""
        given = request.query_params.getlist(name)
        if not given:
            return None
        if len(given) > 1:
            raise ApiValidationError({name: ["Give this parameter once."]})
        raw = given[0]
        value = None
        if _WHOLE_NUMBER.fullmatch(raw):
            digits = raw.lstrip("0") or "0"
            value = most if len(digits) > len(str(most)) else min(int(digits), most)
        if value is None or value < least:
            raise ApiValidationError({name: [f"Give a whole number of at least {least}."]})
        return value

    def get_limit(self, request: Request) -> int | None:
        limit = self._param(request, self.limit_query_param, least=1, most=MAX_PAGE_SIZE)
        return self.default_limit if limit is None else limit

    def get_offset(self, request: Request) -> int:
        # Any offset past the last row answers an empty page, however large.
        return self._param(request, self.offset_query_param, least=0, most=MAX_OFFSET) or 0

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        least = {self.limit_query_param: 1, self.offset_query_param: 0}
        for parameter in parameters:
            parameter["schema"]["minimum"] = least[parameter["name"]]
        return parameters
