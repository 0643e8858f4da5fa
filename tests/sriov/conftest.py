from __future__ import annotations

import pytest

from tests.kube_sim import KubeSimulator
from tests.sriov.support import World, world_build
from tests.whitesky_sim import WhiteskySimulator


@pytest.fixture
def world(whitesky_sim: WhiteskySimulator, kube_sim: KubeSimulator, db: None) -> World:
    return world_build(whitesky_sim, kube_sim)
