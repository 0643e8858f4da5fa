"""The columns an operator chooses on a list: `cols=name,location,per_hour` in its URL (or
`cols` once per column, as the page's checkboxes send it), so that a link shares the
choice; the list's CSV follows it. Without `cols`, every column. A name the list has no
column of is refused (400) naming the columns it has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.http import QueryDict

COLUMNS = "cols"


@dataclass(frozen=True)
class Column:
    key: str  # its name in `cols`
    label: str  # its heading on the page
    csv: tuple[str, ...] = ()  # the CSV's columns it stands for (a list with a CSV)
    numeric: bool = False  # aligned right


@dataclass(frozen=True)
class Chosen:
    """The columns `cols` asks for, in the list's order, or what is wrong with it."""

    columns: list[Column]
    errors: list[str]
    of: Sequence[Column]  # every column of the list, as the chooser offers them

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(column.key for column in self.columns)

    def csv(self, header: Sequence[str]) -> list[str]:
        """The CSV's columns (of `header`, in its order) that those chosen stand for, and
        those no column of the page stands for (the row's id)."""
        offered = {name for column in self.of for name in column.csv}
        chosen = {name for column in self.columns for name in column.csv}
        return [name for name in header if name in chosen or name not in offered]


def columns_chosen(params: QueryDict, columns: Sequence[Column]) -> Chosen:
    asked = [
        name.strip()
        for value in params.getlist(COLUMNS)
        for name in value.split(",")
        if name.strip()
    ]
    if not asked:
        return Chosen(list(columns), [], columns)
    known = [column.key for column in columns]
    if unknown := [name for name in dict.fromkeys(asked) if name not in known]:
        said = ", ".join(repr(name) for name in unknown)
        problem = f"{COLUMNS}: this list has no column {said} (it has {', '.join(known)})"
        return Chosen(list(columns), [problem], columns)
    return Chosen([column for column in columns if column.key in asked], [], columns)
