"""Charts drawn on the server as SVG: the geometry of a line chart and of a stacked bar
chart, computed here and drawn by templates/dashboard/_chart.html, so a page shows them
without JavaScript and under a Content-Security-Policy with no inline style (colours and
strokes are classes of static/css/capvco.css).

Each chart carries its numbers as a table (the same figures, formatted once), which the
page shows below the picture and the chart's CSV repeats: the picture is for the eye, the
table is the record.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property, lru_cache
from html import escape

from django.utils.safestring import SafeString, mark_safe

from gpus.models import CENT

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 28, 16, 30  # room for the axes' labels
X_LABELS_SHOWN = 7
# An axis label's character, of 11px text (capvco.css), in the SVG's units; and the room
# kept between two labels.
TICK_CHAR_WIDTH = 6.5
TICK_GAP = 10
HOUR_LABEL = re.compile(r"\d{4}-(\d{2}-\d{2} \d{2}:\d{2})")


def _tick_text(label: str) -> str:
    """An hour's label on the axis: without its year (the table keeps the whole label)."""
    hour = HOUR_LABEL.fullmatch(label)
    return hour.group(1) if hour else label


Y_TICKS = 4
DOTTED_POINTS = 10  # lines of at most this many points mark each with a dot
HEADROOM = 1.05
SERIES_CLASSES = 8  # s0 … s7 in capvco.css; more series reuse them in turn


@dataclass(frozen=True)
class Series:
    """One named line, or one layer of the bars, with a value per x label."""

    name: str
    values: Sequence[Decimal]
    css: str = ""  # a class of its own ("others", "forecast"); default: by its place


@dataclass(frozen=True)
class Tick:
    at: float
    label: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Line:
    name: str
    css: str
    points: str  # "x,y x,y …" for <polyline>
    area: str  # the same closed down to the x axis, for <polygon> ("" when not filled)
    dots: list[tuple[float, float, str]]  # x, y and the figure it marks


def nice_step(largest: float, ticks: int = Y_TICKS) -> float:
    """A round step (1, 2 or 5 times a power of ten) for about `ticks` ticks up to `largest`."""
    if largest <= 0:
        return 1.0
    raw = largest / ticks
    power = 10 ** math.floor(math.log10(raw))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:,.2f}".rstrip("0")


def _figure(value: Decimal) -> str:
    """To the cent, half to even: the value quantized, as text (what f"{value:.2f}" writes,
    in half the time: a long window's chart has thousands)."""
    return str(value.quantize(CENT))


def _coordinates(values: Iterable[float]) -> list[str]:
    """Coordinates to two places, as str(round(value, 2)) writes each (the same digits,
    correctly rounded, one trailing zero dropped) in a third of the time: a long window's
    chart has thousands. For values within the picture (no exponent)."""
    return [text[:-1] if text[-1] == "0" else text for text in map("%.2f".__mod__, values)]


# A label as HTML text, once: the charts of a page share their steps' labels.
_escaped = lru_cache(maxsize=4096)(escape)


@dataclass
class Chart:
    """What every chart has: a key (its id on the page and in its CSV's name), a title and
    a unit for the reader, the x labels, and the table of its numbers."""

    key: str
    title: str
    # The caption shows the title, then the unit: the currency is said by the unit alone.
    unit: str  # what the y axis counts, with the currency: "EUR per day", "GPUs"
    x_title: str
    x_labels: list[str]
    series: list[Series]
    note: str = ""
    csv_url: str = ""  # set by the page that shows it
    width: int = WIDTH
    height: int = HEIGHT

    # --- the table, also the CSV ---------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        return [self.x_title, *(s.name for s in self.series)]

    @cached_property
    def figures(self) -> list[list[str]]:
        """Each series' values as _figure writes them, for the table and the picture's
        labels alike (inline, column by column: a long window's chart has thousands)."""
        return [[_figure(value) for value in s.values] for s in self.series]

    @cached_property
    def table_columns(self) -> list[list[str]]:
        """The table's figures, column by column (the x labels aside)."""
        more = [[_figure(value) for value in column] for column in self.more_columns()]
        return [*self.figures, *more]

    @cached_property
    def rows(self) -> list[list[str]]:
        columns = self.table_columns
        return [[label, *cells] for label, *cells in zip(self.x_labels, *columns, strict=True)]

    def more_columns(self) -> list[Sequence[Decimal]]:
        """The table's columns after the series'."""
        return []

    @cached_property
    def rows_html(self) -> SafeString:
        """The table's body: drawn here, not cell by cell in the template (a page shows
        hundreds of cells)."""
        # The other cells are figures (_figure: digits, a sign and a point), each row's
        # joined at once.
        between = '</td><td class="num">'
        columns = self.table_columns
        cells = (
            [f'<td class="num">{between.join(row)}</td>' for row in zip(*columns, strict=True)]
            if columns
            else [""] * len(self.x_labels)
        )
        return mark_safe(  # noqa: S308 (every label escaped here; the rest are figures)
            "".join(
                f'<tr><th scope="row">{_escaped(label)}</th>{row}</tr>'
                for label, row in zip(self.x_labels, cells, strict=True)
            )
        )

    @property
    def empty(self) -> bool:
        return not self.x_labels or not self.series

    # --- geometry (each figure computed once: a template asks for it per bar and tick) ---

    @property
    def plot_left(self) -> int:
        return LEFT

    @property
    def plot_right(self) -> int:
        return self.width - RIGHT

    @property
    def plot_top(self) -> int:
        return TOP

    @property
    def plot_bottom(self) -> int:
        return self.height - BOTTOM

    @cached_property
    def floats(self) -> list[list[float]]:
        """Each series' values as floats, for the geometry."""
        return [[float(v) for v in s.values] for s in self.series]

    def largest(self) -> float:
        return max((v for values in self.floats for v in values), default=0.0)

    @cached_property
    def peak(self) -> float:
        return self.largest()

    @cached_property
    def step(self) -> float:
        return nice_step(self.peak * HEADROOM)

    @cached_property
    def top_value(self) -> float:
        # A little room above the largest figure: a line along the top edge is hard to see.
        return max(self.step * math.ceil(self.peak * HEADROOM / self.step), self.step)

    def y_of(self, value: float) -> float:
        span = self.plot_bottom - self.plot_top
        return round(self.plot_bottom - span * value / self.top_value, 2)

    def ys(self, values: Sequence[float]) -> list[float]:
        """y_of each value (a long window's chart has thousands)."""
        bottom, span, top = self.plot_bottom, self.plot_bottom - self.plot_top, self.top_value
        return [round(bottom - span * value / top, 2) for value in values]

    @cached_property
    def xs(self) -> list[float]:
        return [self.x_of(i) for i in range(len(self.x_labels))]

    @cached_property
    def y_ticks(self) -> list[Tick]:
        count = round(self.top_value / self.step)
        return [Tick(self.y_of(i * self.step), _number(i * self.step)) for i in range(count + 1)]

    def x_of(self, index: int) -> float:
        raise NotImplementedError

    @cached_property
    def x_ticks(self) -> list[Tick]:
        texts = [_tick_text(label) for label in self.x_labels]
        # About as many as fit side by side, X_LABELS_SHOWN at most; the last label too.
        widest = max((len(text) for text in texts), default=0) * TICK_CHAR_WIDTH + TICK_GAP
        fit = max(2, int((self.plot_right - self.plot_left) // widest))
        every = max(1, math.ceil(len(texts) / min(X_LABELS_SHOWN, fit)))
        last = len(texts) - 1
        ticks: list[Tick] = []
        taken_to = -math.inf  # where the last label kept ends
        for i in (i for i in range(len(texts)) if i % every == 0 or i == last):
            at, anchor, width = self.x_of(i), self.anchor(i, last), len(texts[i]) * TICK_CHAR_WIDTH
            left = at if anchor == "start" else at - width if anchor == "end" else at - width / 2
            # A label that would run into the one before, or out of the picture: left out.
            if left >= taken_to + TICK_GAP and left + width <= self.width:
                ticks.append(Tick(at, texts[i], anchor))
                taken_to = left + width
        return ticks

    def anchor(self, index: int, last: int) -> str:
        return "middle"

    def css_of(self, index: int, series: Series) -> str:
        return series.css or f"s{index % SERIES_CLASSES}"

    @property
    def legend(self) -> list[tuple[str, str]]:
        return [(s.name, self.css_of(i, s)) for i, s in enumerate(self.series)]


@dataclass
class LineChart(Chart):
    """A line per series over the x labels; `filled` shades the area under each."""

    kind: str = "line"
    filled: bool = False

    def anchor(self, index: int, last: int) -> str:
        # The first and last points sit on the plot's edges: their labels lean inwards.
        return "start" if index == 0 else "end" if index == last else "middle"

    def x_of(self, index: int) -> float:
        span = self.plot_right - self.plot_left
        if len(self.x_labels) < 2:
            return self.plot_left + span / 2
        return round(self.plot_left + span * index / (len(self.x_labels) - 1), 2)

    @cached_property
    def xs(self) -> list[float]:
        # x_of each index, in one comprehension (a long window's line has hundreds).
        left, span, last = self.plot_left, self.plot_right - self.plot_left, len(self.x_labels) - 1
        if last < 1:
            return [self.x_of(i) for i in range(last + 1)]
        return [round(left + span * i / last, 2) for i in range(last + 1)]

    @cached_property
    def lines(self) -> list[Line]:
        drawn = []
        xs = self.xs
        x_texts = [f"{x}," for x in xs]  # each point's "x," once for every line
        bottom, span, top = self.plot_bottom, self.plot_bottom - self.plot_top, self.top_value
        for n, series in enumerate(self.series):
            # Each y as `ys` has it, written at once (only a few points need it as a number).
            y_texts = _coordinates(bottom - span * value / top for value in self.floats[n])
            points = " ".join(map(str.__add__, x_texts, y_texts))
            area = ""
            if self.filled and xs:
                area = f"{xs[0]},{self.plot_bottom} {points} {xs[-1]},{self.plot_bottom}"
            # A dot per point shows a line of one or a few points; along a longer line
            # they would only weigh on the page (the table has every figure).
            dots = []
            if len(xs) <= DOTTED_POINTS:
                ys = self.ys(self.floats[n])
                dots = [
                    (x, y, f"{series.name}, {self.x_labels[i]}: {_figure(series.values[i])}")
                    for i, (x, y) in enumerate(zip(xs, ys, strict=True))
                ]
            drawn.append(Line(series.name, self.css_of(n, series), points, area, dots))
        return drawn


@dataclass
class StackedBarChart(Chart):
    """A bar per x label, its series stacked in order; the total is a column of the
    table. A series with css "forecast" is drawn apart (outlined): what is still to come."""

    kind: str = "bars"
    unit_short: str = ""  # the currency, in each bar's label
    totals_title: str = "total"

    @property
    def columns(self) -> list[str]:
        return [*super().columns, self.totals_title]

    def more_columns(self) -> list[Sequence[Decimal]]:
        return [self.totals]

    @cached_property
    def totals(self) -> list[Decimal]:
        if not self.series:
            return [Decimal(0)] * len(self.x_labels)
        # Step by step, the series in their order.
        columns = zip(*(s.values for s in self.series), strict=True)
        return [sum(column, Decimal(0)) for column in columns]

    def total(self, index: int) -> Decimal:
        return self.totals[index]

    def largest(self) -> float:
        return max((float(total) for total in self.totals), default=0.0)

    @cached_property
    def slot(self) -> float:
        return (self.plot_right - self.plot_left) / max(len(self.x_labels), 1)

    def x_of(self, index: int) -> float:
        return round(self.plot_left + self.slot * (index + 0.5), 2)

    @cached_property
    def xs(self) -> list[float]:
        left, slot = self.plot_left, self.slot
        return [round(left + slot * (i + 0.5), 2) for i in range(len(self.x_labels))]

    @cached_property
    def bars_svg(self) -> SafeString:
        """The bars as SVG, each with what a pointer over it says: drawn here in one pass,
        not attribute by attribute in the template (a long window's chart has thousands)."""
        width = round(max(self.slot * 0.7, 1.0), 2)
        # What every layer's bar at a step shares, written once.
        lefts = [f'" x="{round(x - width / 2, 2)}" y="' for x in self.xs]
        labels = [f", {_escaped(label)}: " for label in self.x_labels]
        size = f'" width="{width}" height="'
        unit = f" {escape(self.unit_short)}" if self.unit_short else ""
        tops = [0.0] * len(self.x_labels)  # each bar's stack so far
        ys_base = self.ys(tops)
        drawn = []
        for n, series in enumerate(self.series):
            css, name = escape(self.css_of(n, series)), escape(series.name)
            values, figures = self.floats[n], self.figures[n]
            tops = [base + max(v, 0.0) for base, v in zip(tops, values, strict=True)]
            ys_top = self.ys(tops)
            for i, value in enumerate(values):
                if value > 0:
                    height = round(max(ys_base[i] - ys_top[i], 0.5), 2)
                    drawn.append(
                        f'<rect class="bar {css}{lefts[i]}{ys_top[i]}{size}{height}">'
                        f"<title>{name}{labels[i]}{figures[i]}{unit}</title></rect>"
                    )
            ys_base = ys_top  # the next layer stands on this one
        return mark_safe("".join(drawn))  # noqa: S308 (every text escaped; the rest numbers)
