"""Keyset pagination: a page is "the N rows after (or before) this one" in a fixed order
of (sort field, id), read through an index, so the last page of a table with history
costs what the first one does. There are no page numbers: first, previous, next, last.
The dashboard's pages and the API's cursor lists (capvco_web.api_input) both page here.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from django.db import models
from django.db.models import Q, QuerySet
from django.http import QueryDict

M = TypeVar("M", bound=models.Model)

AFTER, BEFORE, LAST = "after", "before", "last"
CURSOR_PARAMS = (AFTER, BEFORE, LAST)
COUNT_CAP = 500  # past this the count says "more than": counting all would read all


class BadCursor(ValueError):
    """A page link that was not made by us, or for another sort."""


@dataclass(frozen=True)
class Sort:
    """An order of the rows: a field that is never NULL, then the id, both one way."""

    field: str
    descending: bool
    label: str

    def order(self, reverse: bool = False) -> list[str]:
        down = self.descending != reverse
        keys = ["id"] if self.field == "id" else [self.field, "id"]
        return [f"-{key}" for key in keys] if down else keys

    def beyond(self, value: Any, pk: int, reverse: bool = False) -> Q:
        """The rows that come after (value, pk) in this order (before it, reversed)."""
        down = self.descending != reverse
        op = "lt" if down else "gt"
        if self.field == "id":
            return Q(**{f"id__{op}": pk})
        beyond = Q(**{f"{self.field}__{op}": value}) | Q(**{self.field: value, f"id__{op}": pk})
        # The same, plus a bound the database can start an index scan at: an OR alone
        # would make it read the index from its first entry, however deep the page.
        return Q(**{f"{self.field}__{op}e": value}) & beyond


@dataclass
class KeysetPage(Generic[M]):
    rows: list[M]
    has_previous: bool
    has_next: bool
    count: int
    count_capped: bool
    sort: Sort

    def cursor(self, row: M) -> str:
        value = getattr(row, self.sort.field)
        text = value.isoformat() if isinstance(value, datetime) else str(value)
        raw = json.dumps([text, row.pk], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @property
    def next_cursor(self) -> str:
        return self.cursor(self.rows[-1]) if self.rows and self.has_next else ""

    @property
    def previous_cursor(self) -> str:
        return self.cursor(self.rows[0]) if self.rows and self.has_previous else ""


def _decode(cursor: str, field: models.Field[Any, Any]) -> tuple[Any, int]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        # Strict: a character outside the alphabet is refused, not skipped.
        raw = base64.b64decode(padded.encode(), altchars=b"-_", validate=True)
        text, pk = json.loads(raw)
        # An id past a bigint would fail in the database, not here.
        if not isinstance(text, str) or not isinstance(pk, int) or abs(pk) >= 2**63:
            raise ValueError(cursor)
        is_time = isinstance(field, models.DateTimeField)
        value: Any = datetime.fromisoformat(text) if is_time else text
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError) as exc:
        raise BadCursor(
            "This page link is not valid (made for another list or order); "
            "start again from the first page."
        ) from exc
    return value, pk


def keyset_page(
    queryset: QuerySet[M],
    *,
    sort: Sort,
    params: QueryDict,
    size: int,
    count: int | None = None,
    count_cap: int = COUNT_CAP,
) -> KeysetPage[M]:
    """The page of `queryset` that `params` asks for: the first, `after=<cursor>`,
    `before=<cursor>` or `last=1`. BadCursor for a cursor we did not make. `count`: the
    number of rows when the caller already knows it (one query fewer); otherwise counted
    up to `count_cap` rows and said to be capped past it."""
    field = queryset.model._meta.get_field(sort.field)
    assert isinstance(field, models.Field) and not field.null, "keyset sorts need NOT NULL"
    if count is None:
        count = queryset.order_by()[: count_cap + 1].count()
    if after := params.get(AFTER):
        value, pk = _decode(after, field)
        rows = list(queryset.filter(sort.beyond(value, pk)).order_by(*sort.order())[: size + 1])
        return KeysetPage(rows[:size], True, len(rows) > size, count, count > count_cap, sort)
    if before := params.get(BEFORE):
        value, pk = _decode(before, field)
        back = queryset.filter(sort.beyond(value, pk, reverse=True))
        rows = list(back.order_by(*sort.order(reverse=True))[: size + 1])
        has_previous = len(rows) > size
        return KeysetPage(rows[:size][::-1], has_previous, True, count, count > count_cap, sort)
    if params.get(LAST):
        rows = list(queryset.order_by(*sort.order(reverse=True))[: size + 1])
        has_previous = len(rows) > size
        return KeysetPage(rows[:size][::-1], has_previous, False, count, count > count_cap, sort)
    rows = list(queryset.order_by(*sort.order())[: size + 1])
    return KeysetPage(rows[:size], False, len(rows) > size, count, count > count_cap, sort)
