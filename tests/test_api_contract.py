"""The API keeps the contract its own OpenAPI schema states: schemathesis sends generated
requests, valid and invalid, to a live server, as a logged-in superuser, and runs every
check on each answer: no 500, every status documented, every body as the schema says,
valid input accepted and invalid input refused. Every operation takes part; the few rules
no schema can state are listed in tests/api_fuzz.py (UNSTATABLE).

Bounded and derandomized here (the same cases on every run); `python -m tests.api_fuzz`
runs the long one, coverage and stateful phases included. The schema is built when the
test runs, not when the suite is collected (schemathesis' parametrize builds every
operation's cases at collection, and its lazy loader does not run under pytest 9), and
schemathesis is imported then too.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings

from tests.api_fuzz import (
    keeps_failure,
    pin_path,
    seed_world,
    served_schema,
    superuser_headers,
)

EXAMPLES = int(os.environ.get("CAPVCO_API_CONTRACT_EXAMPLES", "25"))
contract = hypothesis_settings(
    max_examples=EXAMPLES,
    phases=[Phase.explicit, Phase.generate],  # a failure as found: shrinking costs minutes
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
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


def test_every_operation_keeps_the_contract(
    live_server: Any, world: dict[str, int], auth: dict[str, str]
) -> None:
    import schemathesis
    from schemathesis.generation import GenerationMode

    schema = schemathesis.openapi.from_dict(served_schema())
    schema.hook("filter_failure")(keeps_failure)
    failures, operations = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @contract
            def keeps_it(case: schemathesis.Case) -> None:
                pin_path(case, world)
                case.call_and_validate(base_url=live_server.url, headers=auth)

            try:
                keeps_it()
            except Exception as exc:  # every operation's failure is reported, not the first
                failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert operations == len(schema)
    assert not failures, "\n\n".join(failures)
