"""The API keeps the contract its own OpenAPI schema states: schemathesis sends generated
requests, valid and invalid, to a live server, as a logged-in superuser, and runs every
check on each answer: no 500, every status documented, every body as the schema says,
valid input accepted and invalid input refused. Every operation takes part; the few rules
no schema can state are listed in tests/api_fuzz.py (UNSTATABLE).

Bounded and derandomized here (the same cases on every run); `python -m tests.api_fuzz`
runs the long one, stateful phase included.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from tests.api_fuzz import (
    keeps_failure,
    pin_path,
    schema_for_schemathesis,
    seed_world,
    served_schema,
    superuser_headers,
)

EXAMPLES = int(os.environ.get("CAPVCO_API_CONTRACT_EXAMPLES", "25"))

schema = schemathesis.openapi.from_dict(schema_for_schemathesis(served_schema()))
schema.config.generation.update(max_examples=EXAMPLES)
schema.hook("filter_failure")(keeps_failure)
contract = hypothesis_settings(
    deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.fixture
def world(transactional_db: None) -> dict[str, int]:
    return seed_world()


@pytest.fixture
def auth(world: dict[str, int]) -> dict[str, str]:
    # The session authenticates; an empty Authorization header tells schemathesis the
    # credentials are ours (it then checks that leaving them out or garbling them is
    # refused) rather than drawing one of another scheme that the session outranks.
    return {**superuser_headers(), "Authorization": ""}


@pytest.fixture(autouse=True)
def unthrottled(settings: Any) -> None:
    """Thousands of calls a minute from one caller: the throttles (tests/test_auth.py)
    would answer 429 and hide what the API does with them."""
    rates = {"anon": None, "user": None, "failed_token_auth": None}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}


@schema.parametrize()
@contract
def test_every_operation_keeps_the_contract(
    case: schemathesis.Case, live_server: Any, world: dict[str, int], auth: dict[str, str]
) -> None:
    pin_path(case, world)
    case.call_and_validate(base_url=live_server.url, headers=auth)
