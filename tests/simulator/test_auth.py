"""Every /api/1 call needs a valid, unexpired HS256 JWT; the IAM refreshes one."""

from __future__ import annotations

import base64
import json
import time

import pytest
import requests

from tests.whitesky_sim import WhiteskySimulator


def _me(sim: WhiteskySimulator, authorization: str | None) -> requests.Response:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return requests.get(f"{sim.api_url}/me", headers=headers, timeout=10)


def _refresh(sim: WhiteskySimulator, token: str) -> requests.Response:
    return requests.get(
        f"{sim.iam_url}/v1/oauth/jwt/refresh",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def _claims(token: str) -> dict[str, object]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def test_a_valid_token_is_accepted(whitesky_sim: WhiteskySimulator) -> None:
    response = _me(whitesky_sim, f"Bearer {whitesky_sim.token()}")

    assert response.status_code == 200
    assert response.json()["customers"][0]["customer_id"] == whitesky_sim.customer_id


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer not-a-jwt",
        "Bearer a.b.c",
        "Basic dXNlcjpwYXNz",
    ],
    ids=["missing", "empty", "no-token", "not-a-jwt", "garbage-parts", "basic-auth"],
)
def test_missing_or_malformed_token_is_401_with_a_message(
    whitesky_sim: WhiteskySimulator, authorization: str | None
) -> None:
    response = _me(whitesky_sim, authorization)

    assert response.status_code == 401
    assert response.json()["message"]


def test_a_token_with_a_bad_signature_is_401(whitesky_sim: WhiteskySimulator) -> None:
    header, payload, signature = whitesky_sim.token().split(".")
    forged = f"{header}.{payload}.{signature[:-4]}AAAA"

    response = _me(whitesky_sim, f"Bearer {forged}")

    assert response.status_code == 401
    assert "signature" in response.json()["message"]


def test_the_token_is_an_hs256_jwt_with_exp_iat_and_sub(whitesky_sim: WhiteskySimulator) -> None:
    token = whitesky_sim.token()
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    claims = _claims(token)

    assert header["alg"] == "HS256"
    assert claims["sub"] == "demo-user"
    assert isinstance(claims["iat"], int) and isinstance(claims["exp"], int)
    assert claims["exp"] - claims["iat"] == 3600


def test_token_ttl_is_configurable(whitesky_sim: WhiteskySimulator) -> None:
    whitesky_sim.configure(token_ttl=5)

    claims = _claims(whitesky_sim.token())

    assert claims["exp"] - claims["iat"] == 5


def test_an_expired_token_is_401(whitesky_sim: WhiteskySimulator) -> None:
    whitesky_sim.configure(token_ttl=1)
    token = whitesky_sim.token()
    expires = _claims(token)["exp"]
    assert isinstance(expires, int)
    time.sleep(max(0.0, expires - time.time()) + 0.05)

    response = _me(whitesky_sim, f"Bearer {token}")

    assert response.status_code == 401
    assert "expired" in response.json()["message"]


def test_switch_token_expiry_uses_sim_clock_expires_a_token_by_advancing_the_clock(
    whitesky_sim: WhiteskySimulator,
) -> None:
    whitesky_sim.configure(token_expiry_uses_sim_clock=True, token_ttl=60)
    token = whitesky_sim.token()
    assert _me(whitesky_sim, f"Bearer {token}").status_code == 200

    whitesky_sim.advance(61)

    assert _me(whitesky_sim, f"Bearer {token}").status_code == 401


def test_advancing_the_clock_does_not_expire_tokens_by_default(
    whitesky_sim: WhiteskySimulator,
) -> None:
    token = whitesky_sim.token()

    whitesky_sim.advance(30 * 24 * 3600)

    assert _me(whitesky_sim, f"Bearer {token}").status_code == 200


def test_refresh_answers_a_new_jwt_as_plain_text_that_the_api_accepts(
    whitesky_sim: WhiteskySimulator,
) -> None:
    whitesky_sim.configure(token_ttl=120)
    old = whitesky_sim.token()
    time.sleep(1.0)  # whole-second iat: let the new token differ from the old one

    response = _refresh(whitesky_sim, old)

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    new = response.text
    assert new != old
    assert _claims(new)["iat"] > _claims(old)["iat"]
    assert _me(whitesky_sim, f"Bearer {new}").status_code == 200


def test_an_expired_token_cannot_refresh(whitesky_sim: WhiteskySimulator) -> None:
    whitesky_sim.configure(token_expiry_uses_sim_clock=True, token_ttl=60)
    token = whitesky_sim.token()
    whitesky_sim.advance(120)

    response = _refresh(whitesky_sim, token)

    assert response.status_code == 401


def test_refresh_without_a_token_is_401(whitesky_sim: WhiteskySimulator) -> None:
    response = requests.get(f"{whitesky_sim.iam_url}/v1/oauth/jwt/refresh", timeout=10)

    assert response.status_code == 401


def test_a_restarted_simulator_refuses_tokens_of_the_previous_process(
    whitesky_sim: WhiteskySimulator,
) -> None:
    token = whitesky_sim.token()
    with WhiteskySimulator() as other:
        assert _me(other, f"Bearer {token}").status_code == 401


def test_the_call_log_names_the_holder_of_each_calls_token(
    whitesky_sim: WhiteskySimulator,
) -> None:
    other = whitesky_sim.token(subject="sriov-operator")
    assert _claims(other)["sub"] == "sriov-operator"
    _me(whitesky_sim, f"Bearer {whitesky_sim.token()}")
    _me(whitesky_sim, f"Bearer {other}")
    _me(whitesky_sim, None)
    refreshed = _refresh(whitesky_sim, other).text
    assert _claims(refreshed)["sub"] == "sriov-operator"  # a refresh keeps the holder
    subjects = [call["subject"] for call in whitesky_sim.calls()["calls"]]
    assert subjects == ["demo-user", "sriov-operator", None]


def test_a_token_for_a_holder_needs_a_name(whitesky_sim: WhiteskySimulator) -> None:
    response = requests.post(f"{whitesky_sim.base_url}/_sim/token", json={"subject": ""}, timeout=5)
    assert response.status_code == 400
    assert "subject" in response.json()["message"]
