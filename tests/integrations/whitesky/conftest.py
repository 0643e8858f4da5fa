from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from capvco_web.integrations.whitesky import AllowedHosts, RetryPolicy, WhiteskyClient
from tests.integrations.whitesky.world import WORLD
from tests.whitesky_sim import WhiteskySimulator

# Fast and deterministic: three attempts, tiny backoff (recorded, not slept), short timeouts.
TEST_RETRY = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, max_retry_after=30.0)
READ_TIMEOUT = 1.0


def allowing(*urls: str | None) -> AllowedHosts:
    """An allow-list that holds exactly the origins of these URLs."""
    origins = [urlsplit(url) for url in urls if url]
    entries = [f"{o.scheme}://{o.netloc}" if o.scheme == "http" else o.netloc for o in origins]
    return AllowedHosts(entries, source="the test's allowed hosts")


@pytest.fixture
def sim(whitesky_sim: WhiteskySimulator) -> WhiteskySimulator:
    whitesky_sim.reset(world=WORLD)
    return whitesky_sim


@pytest.fixture
def sleeps() -> list[float]:
    """Every backoff the clients of a test asked for, in order (nothing really sleeps)."""
    return []


@pytest.fixture
def make_client(
    sim: WhiteskySimulator, sleeps: list[float]
) -> Iterator[Callable[..., WhiteskyClient]]:
    clients: list[WhiteskyClient] = []

    def make(**overrides: Any) -> WhiteskyClient:
        settings: dict[str, Any] = {
            "api_url": sim.api_url,
            "customer_id": sim.customer_id,
            "token": sim.token(),
            "iam_url": sim.iam_url,
            "sleep": sleeps.append,
            "retry": TEST_RETRY,
            "rng": random.Random(0),
            "timeout": (2.0, READ_TIMEOUT),
            "long_timeout": (2.0, READ_TIMEOUT),
        }
        settings.update(overrides)
        settings.setdefault("allowed_hosts", allowing(settings["api_url"], settings["iam_url"]))
        client = WhiteskyClient(**settings)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., WhiteskyClient]) -> WhiteskyClient:
    return make_client()
