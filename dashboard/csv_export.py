"""The CSV of a dashboard list (its "Export CSV"): every row its filters select, not one
page, streamed as it is read, in chunks of rows with what each chunk needs read with it
(bounded queries per chunk, none per row); the row's id, then the CSV columns of the
columns the page shows (`dashboard.columns.Chosen.csv`); each cell as the API's CSV
writes it (`capvco_web.api_csv.csv_cell`: a formula a spreadsheet would run is defused).
What is wrong with the query answers 400, as text naming each problem."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TypeVar

from django.db.models import Model, QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone

from capvco_web.api_csv import csv_cell

M = TypeVar("M", bound=Model)
CHUNK = 2000  # rows read at once


class _Echo:
    """A file for csv.writer that hands each line back instead of keeping it."""

    def write(self, value: str) -> str:
        return value


def chunks(rows: QuerySet[M], size: int = CHUNK) -> Iterator[list[M]]:
    """`rows` a chunk at a time, read from one cursor."""
    found = rows.iterator(chunk_size=size)
    while chunk := list(islice(found, size)):
        yield chunk


def csv_response(
    name: str, columns: Sequence[str], rows: Iterable[Mapping[str, object]]
) -> StreamingHttpResponse:
    """`rows` (each a value per column name, at least those of `columns`) as the file
    `<name>-<time>.csv`: a header of `columns`, then a line per row."""
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(columns)
        for row in rows:
            yield writer.writerow(csv_cell(row[column]) for column in columns)

    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    return StreamingHttpResponse(
        lines(),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}-{stamp}.csv"'},
    )


def csv_refused(problems: Sequence[str]) -> HttpResponse:
    return HttpResponse("; ".join(problems), status=400, content_type="text/plain")
