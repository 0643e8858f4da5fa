"""The control plane on the simulator, and Django's clock on the simulator's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from tests.gpus.conftest import Plane, plane  # noqa: F401 (the control plane on the simulator)
from tests.whitesky_sim import WhiteskySimulator


@dataclass
class SimClock:
    """Django's clock set to the simulator's: `to` moves both forward."""

    sim: WhiteskySimulator
    offset: timedelta = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def sync(self, sim_now: float) -> datetime:
        self.offset = datetime.fromtimestamp(sim_now, UTC) - datetime.now(UTC)
        return self.now()

    def to(self, moment: datetime) -> datetime:
        return self.sync(self.sim.advance(max((moment - self.now()).total_seconds(), 0)))


@pytest.fixture
def clock(
    plane: Plane,  # noqa: F811 (the fixture above)
    monkeypatch: pytest.MonkeyPatch,
) -> SimClock:
    clock = SimClock(plane.sim)
    clock.sync(plane.sim.advance(0))
    monkeypatch.setattr(timezone, "now", clock.now)
    return clock
