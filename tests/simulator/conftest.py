"""Load the simulator plugin here too, so these tests run before (or without) the project's
tests/conftest.py, which loads it for the whole suite."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.simulator.support import Api

if TYPE_CHECKING:
    # Imported by the plugin mechanism, not here: an early import would dodge pytest's
    # assertion rewriting of the plugin.
    from tests.whitesky_sim import WhiteskySimulator

PLUGIN = "tests.whitesky_sim"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)


@pytest.fixture
def api(whitesky_sim: WhiteskySimulator) -> Api:
    return Api(whitesky_sim)
