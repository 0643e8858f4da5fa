"""Reading the cloud's rows: how current each location's mirror is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cloud.models import Location


@dataclass(frozen=True)
class Observation:
    location: Location
    age: timedelta | None  # since the last complete observation began; None: never
    stale: bool


def observations(
    *, locations: Sequence[Location], now: datetime, interval: timedelta
) -> list[Observation]:
    """Each location's last complete observation, stale past two observe intervals (or
    when there was none): the one rule the overview page and the stale-location alert
    share."""
    found = []
    for location in locations:
        last = location.last_complete_observation_at
        age = now - last if last else None
        found.append(Observation(location, age, age is None or age > 2 * interval))
    return found
