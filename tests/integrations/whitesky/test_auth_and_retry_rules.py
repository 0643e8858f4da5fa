"""The credential's rules (expiry, refresh answers, secrecy) and the backoff arithmetic."""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import random
import time

import pytest

from capvco_web.integrations.whitesky import RetryPolicy, Unauthorized, WhiteskyClient
from capvco_web.integrations.whitesky.auth import (
    JwtCredential,
    jwt_expiry,
    token_from_refresh_body,
)
from capvco_web.integrations.whitesky.transport import _retry_after
from tests.integrations.whitesky.conftest import allowing


def make_jwt(exp: float | None) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims: dict[str, object] = {"sub": "svc"} if exp is None else {"sub": "svc", "exp": exp}
    return f"{part({'alg': 'none'})}.{part(claims)}.c2ln"


def test_expiry_is_read_from_the_unverified_payload() -> None:
    assert jwt_expiry(make_jwt(1_700_000_000)) == 1_700_000_000
    assert jwt_expiry(make_jwt(None)) is None
    assert jwt_expiry("not-a-jwt") is None


def test_credential_needs_refresh_when_less_than_a_minute_remains() -> None:
    now = 1_000_000.0
    assert not JwtCredential(make_jwt(now + 61), clock=lambda: now).needs_refresh()
    assert JwtCredential(make_jwt(now + 59), clock=lambda: now).needs_refresh()
    assert JwtCredential(make_jwt(now - 1), clock=lambda: now).expired()


@pytest.mark.parametrize(
    "body",
    [
        "{jwt}",
        ' "{jwt}"\n',
        '{{"jwt": "{jwt}"}}',
        '{{"token": "{jwt}"}}',
        '{{"access_token": "{jwt}"}}',
    ],
    ids=["text", "quoted", "jwt", "token", "access_token"],
)
def test_refresh_answer_is_accepted_in_every_known_shape(body: str) -> None:
    token = make_jwt(2_000_000_000)
    assert token_from_refresh_body(body.format(jwt=token)) == token


@pytest.mark.parametrize(
    "body",
    [
        "",
        "<html>error</html>",
        '{"message": "no"}',
        "<p>a.b.c</p>",  # two dots do not make a JWT
        '{"jwt": "e30.e30.<script>"}',
        "e30." + "a" * 9000 + ".c2ln",  # longer than any credential stored
    ],
)
def test_refresh_answer_without_a_jwt_is_unauthorized(body: str) -> None:
    with pytest.raises(Unauthorized):
        token_from_refresh_body(body)


def test_token_is_in_no_repr() -> None:
    token = make_jwt(2_000_000_000)
    client = WhiteskyClient(
        api_url="https://x/api/1", customer_id="c", token=token, allowed_hosts=allowing("https://x")
    )
    assert token not in repr(client)
    assert token not in repr(JwtCredential(token))


def test_failing_refresh_callback_keeps_the_token_and_logs_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    new = make_jwt(2_000_000_000)

    def store(token: str) -> None:
        raise RuntimeError(f"cannot store {token}")

    credential = JwtCredential(make_jwt(1), on_refreshed=store)
    with caplog.at_level(logging.DEBUG):
        credential.replace(new)
    assert credential.token == new
    assert "RuntimeError" in caplog.text
    assert new not in caplog.text


def test_backoff_grows_exponentially_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)
    rng = random.Random(1)
    for retry, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (6, 8.0)]:
        delay = policy.delay(retry, retry_after=None, rng=rng)
        assert ceiling / 2 <= delay <= ceiling


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    policy = RetryPolicy(max_retry_after=30.0)
    assert policy.delay(0, retry_after=7, rng=random.Random()) == 7
    assert policy.delay(0, retry_after=3600, rng=random.Random()) == 30.0


def test_retry_after_header_is_read_as_seconds_or_as_an_http_date() -> None:
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert _retry_after("12") == 12.0
    assert 55 <= (_retry_after(in_a_minute) or 0) <= 60
    assert _retry_after("soon") is None
    assert _retry_after(None) is None
