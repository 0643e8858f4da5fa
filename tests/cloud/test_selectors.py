"""When a location's mirror is stale: the rule the overview page and the stale-location
alert both read (cloud.selectors.observations)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cloud.selectors import observations
from tests.factories import LocationFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
INTERVAL = timedelta(minutes=5)


def test_a_location_is_stale_past_two_intervals_or_never_observed_completely() -> None:
    fresh = LocationFactory(name="fresh", last_complete_observation_at=NOW - 2 * INTERVAL)
    late = LocationFactory(
        name="late", last_complete_observation_at=NOW - 2 * INTERVAL - timedelta(seconds=1)
    )
    never = LocationFactory(name="never", last_complete_observation_at=None)

    seen = observations(locations=[fresh, late, never], now=NOW, interval=INTERVAL)

    assert [(o.location.name, o.stale) for o in seen] == [
        ("fresh", False),
        ("late", True),
        ("never", True),
    ]
    assert seen[0].age == 2 * INTERVAL and seen[2].age is None
