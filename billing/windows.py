"""The window a page's money charts cover, as its query asks (`?window=7d&step=hour`,
`?start=2026-11-01&end=2026-12-01&step=day`): the last 24 hours, 7 or 30 days, this month,
last month, or a start and an end; by the hour or by the day. One reading for the pages
and their charts' CSVs, held to the bounds of the costs API's series
(billing.selectors.series_bounds), so a window the page draws is one the API answers; and
by the hour to a week (HOURLY_DAYS_MAX), as a chart draws a bar per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

from django.core.exceptions import ValidationError
from django.http import QueryDict
from django.utils.dateparse import parse_datetime

from billing.rollups import HOUR, month_of, next_month
from billing.selectors import SeriesStep, series_bounds, step_after, step_start
from capvco_web.validators import is_date_text

# The presets: what each is called, and how long it is (None: a calendar month).
PRESETS: dict[str, tuple[str, timedelta | None]] = {
    "24h": ("the last 24 hours", timedelta(hours=24)),
    "7d": ("the last 7 days", timedelta(days=7)),
    "30d": ("the last 30 days", timedelta(days=30)),
    "month": ("this month", None),
    "last-month": ("last month", None),
}
WINDOW_STEPS: tuple[SeriesStep, ...] = ("hour", "day")
# A chart draws a bar (and its table a row) per step: by the hour, a week at most.
HOURLY_DAYS_MAX = 7
DEFAULT_WINDOW, DEFAULT_STEP = "month", "day"
PARAMETERS = ("window", "start", "end", "step")
CUSTOM = "custom"


@dataclass(frozen=True)
class Window:
    """[start, end) in whole steps; `name` is the preset's, or CUSTOM."""

    name: str
    step: SeriesStep
    start: datetime
    end: datetime

    @property
    def label(self) -> str:
        if self.name == CUSTOM:
            shown = "%Y-%m-%d" if self.step == "day" else "%Y-%m-%d %H:00"
            said = f"{self.start:{shown}} to {self.end:{shown}} UTC (the end not included)"
        else:
            said = PRESETS[self.name][0]
        return f"{said}, by the {self.step}"

    @property
    def query(self) -> dict[str, str]:
        """The parameters that ask for it again (a page's URL, its charts' CSVs)."""
        if self.name != CUSTOM:
            return {"window": self.name, "step": self.step}
        return {"start": _text(self.start), "end": _text(self.end), "step": self.step}

    @property
    def by_the_hour_too(self) -> bool:
        """Whether the same span may be asked by the hour (HOURLY_DAYS_MAX)."""
        return self.end - self.start <= timedelta(days=HOURLY_DAYS_MAX)

    @property
    def steps(self) -> list[datetime]:
        """Each step's start."""
        found, moment = [], self.start
        while moment < self.end:
            found.append(moment)
            moment = step_after(self.step, moment)
        return found


def preset_step(name: str, step: str) -> SeriesStep:
    """The step a preset is offered with, from a page asked by `step`: by the hour where
    it fits (HOURLY_DAYS_MAX), else by the day."""
    length = PRESETS[name][1]
    fits = length is not None and length <= timedelta(days=HOURLY_DAYS_MAX)
    return "hour" if step == "hour" and fits else "day"


def _text(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d}" if moment.hour == 0 else f"{moment:%Y-%m-%dT%H:%MZ}"


def window_from(params: QueryDict | Mapping[str, str], *, now: datetime) -> Window:
    """The window `params` ask for (nothing: this month by the day). Refused
    (ValidationError naming each parameter at fault): an unknown window or step, a window
    given with a start or an end, a start without an end or the other way round, a time
    that is not ISO 8601; what the costs API refuses (series_bounds): a bound that is not
    the start of a step, an end not after the start, more than two years, or hours older
    than those kept; and by the hour, more than HOURLY_DAYS_MAX days."""
    given, problems = _given(params), {}
    step = given.get("step") or DEFAULT_STEP
    if step not in WINDOW_STEPS:
        problems["step"] = f"Give hour or day (not {step!r})."
    name = given.get("window")
    if given.get("start") or given.get("end"):
        if name and (problem := window_problem(name, bounds_given=True)):
            problems["window"] = problem
        moments = {}
        for bound in ("start", "end"):
            text = given.get(bound)
            if not text:
                problems[bound] = f"Give the {bound} too (ISO 8601, UTC), or a window."
            elif (moment := _moment(text)) is None:
                problems[bound] = (
                    f"Give a date or a time in ISO 8601, UTC (2026-12-01 or "
                    f"2026-12-01T10:00Z), not {text!r}."
                )
            else:
                moments[bound] = moment
        if problems:
            raise ValidationError(problems)
        window = Window(CUSTOM, cast(SeriesStep, step), moments["start"], moments["end"])
    else:
        name = name or DEFAULT_WINDOW
        if problem := window_problem(name, bounds_given=False):
            problems["window"] = problem
        if problems:
            raise ValidationError(problems)
        window = preset(name, cast(SeriesStep, step), now)
    series_bounds(step=window.step, start=window.start, end=window.end, now=now)
    if window.step == "hour" and window.end - window.start > timedelta(days=HOURLY_DAYS_MAX):
        raise ValidationError(
            {
                "end": f"By the hour, a window is at most {HOURLY_DAYS_MAX} days "
                f"({HOURLY_DAYS_MAX * 24} hours): give a shorter one, or step by the day."
            }
        )
    return window


def window_problem(name: str, *, bounds_given: bool) -> str | None:
    """What is wrong with asking for the window `name` (None: nothing), said alike on the
    pages and in the costs API: a start or an end given beside it, or no preset of ours."""
    if bounds_given:
        return "Give a window or a start and an end, not both."
    if name not in PRESETS:
        return f"Give one of {', '.join(PRESETS)} (not {name!r})."
    return None


def _given(params: QueryDict | Mapping[str, str]) -> dict[str, str]:
    """Each of ours once: given twice, refused (a page's link would say one of them)."""
    given = {}
    for name in PARAMETERS:
        values = params.getlist(name) if isinstance(params, QueryDict) else [params.get(name)]
        values = [v for v in values if v is not None]
        if len(values) > 1:
            raise ValidationError({name: "Give this parameter once."})
        if values:
            given[name] = values[0]
    return given


def _moment(text: str) -> datetime | None:
    """A date (its midnight) or a date and time, UTC unless it says its offset."""
    try:
        moment = parse_datetime(text) if is_date_text(text) else None
    except ValueError:  # a date that does not exist (2026-02-30)
        return None
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def preset(name: str, step: SeriesStep, now: datetime) -> Window:
    """A preset in whole steps: the last 24 hours, 7 or 30 days are as many hours or days,
    the one now running the last (24 hours by the day: today); a month, its days or hours
    (or the month itself, for the costs API's `step=month`)."""
    length = PRESETS[name][1]
    if length is not None:
        end = step_after(step, step_start(step, now))
        return Window(name, step, end - length, end)
    this_month = month_of(now)
    if name == "month":
        return Window(name, step, this_month, next_month(now))
    return Window(name, step, month_of(this_month - HOUR), this_month)
