"""CSV answers of the API (`?format=csv`, or `Accept: text/csv`): a header row, then one
row per item, the same values as the JSON answer. Errors are answered in JSON whatever
was asked: a CSV body has no place for them."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

# A cell a spreadsheet would run as a formula; names come from whitesky, not only from us.
# The API's CSV and the dashboard lists' (dashboard.csv_export) write their cells alike.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()  # ISO 8601: a `T` between the date and the time
    text = str(value)
    if text.startswith(FORMULA_START) and not _NUMBER.fullmatch(text):
        return f"'{text}"
    return text


def _rows(data: Any) -> tuple[Sequence[Mapping[str, Any]], list[str]]:
    """The rows of an answer and the field names of their serializer: a list's, the
    `results` of a page or of a series, or one object as a row of its own."""
    if isinstance(data, Mapping) and "results" not in data:
        serializer = getattr(data, "serializer", None)
        return [data], list(serializer.fields if serializer is not None else data)
    rows = data["results"] if isinstance(data, Mapping) else data
    serializer = getattr(rows, "serializer", None) or getattr(data, "serializer", None)
    if serializer is not None and not hasattr(serializer, "child"):
        serializer = serializer.fields.get("results")
    child = getattr(serializer, "child", None)
    if child is not None:
        return rows, list(child.fields)
    return rows, list(rows[0]) if rows else []


class CsvRenderer(BaseRenderer):
    """The rows of an answer under a header of their serializer's field names: the header
    is there when no row is."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        rows, columns = _rows(data)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(csv_cell(row.get(name)) for name in columns)
        context = renderer_context or {}
        response, view = context.get("response"), context.get("view")
        if response is not None and view is not None:
            name = getattr(view, "csv_name", "export")
            response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        return out.getvalue().encode(self.charset)


URL_FORMATS = ("json", "csv")
# The `format` parameter of a CsvMixin view, as its schema says it.
FORMAT_PARAMETER = OpenApiParameter(
    "format",
    str,
    enum=list(URL_FORMATS),
    description="`csv` (or `Accept: text/csv`): the same rows as CSV, a header row of the "
    "field names first; errors stay JSON",
)


class CsvMixin:
    """A view that answers CSV beside JSON (and the browsable API). An unknown `format` is
    refused with a 400 naming it rather than DRF's 404, and errors stay JSON."""

    renderer_classes: Sequence[type[BaseRenderer]] = [
        JSONRenderer,
        BrowsableAPIRenderer,
        CsvRenderer,
    ]
    csv_name = "export"  # the file name a download is saved under, less `.csv`

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # `?format=` takes the formats the schema names; the browsable page is had by
        # asking for HTML (a browser's Accept), as on every other endpoint.
        given = request.query_params.get(api_settings.URL_FORMAT_OVERRIDE)
        if given is not None and given not in URL_FORMATS and not force:
            raise ApiValidationError(
                {api_settings.URL_FORMAT_OVERRIDE: [f"Give one of {', '.join(URL_FORMATS)}."]}
            )
        try:
            return super().perform_content_negotiation(request, force)  # type: ignore[misc]
        except Http404 as exc:
            formats = ", ".join(r.format for r in self.get_renderers())  # type: ignore[attr-defined]
            raise ApiValidationError(
                {api_settings.URL_FORMAT_OVERRIDE: [f"Give one of {formats}."]}
            ) from exc

    def handle_exception(self, exc: Exception) -> Response:
        response: Response = super().handle_exception(exc)  # type: ignore[misc]
        request = self.request  # type: ignore[attr-defined]
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = JSONRenderer.media_type
        return response
