"""The credential goes only to allowed hosts, redirects are never followed, and what a
server answers reaches an error message only as a short whitesky `{"message"}`: never an
HTML page or any other foreign body. Against real local HTTP servers."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from capvco_web.integrations.whitesky import (
    BadRequest,
    HostNotAllowed,
    Unauthorized,
    Unavailable,
    UnexpectedResponse,
    WhiteskyClient,
    WhiteskyError,
)
from tests.http_stub import HttpStub, Reply, html, redirect
from tests.integrations.whitesky.conftest import allowing
from tests.integrations.whitesky.test_auth_and_retry_rules import make_jwt
from tests.whitesky_sim import WhiteskySimulator

MakeClient = Callable[..., WhiteskyClient]
MakeStub = Callable[[Reply], HttpStub]
PAGE = "Welcome to the collector; your token was stored"


def assert_short_and_foreign_free(error: WhiteskyError) -> None:
    text = str(error)
    assert "\n" not in text and "\r" not in text
    assert len(error.message) <= 300
    assert "<" not in text and PAGE not in text


# --- the allow-list --------------------------------------------------------------------


def test_credential_is_not_sent_to_an_api_url_not_allowed(
    make_client: MakeClient, http_stub: MakeStub, sim: WhiteskySimulator
) -> None:
    collector = http_stub(Reply(200, b"{}", {"Content-Type": "application/json"}))
    client = make_client(
        api_url=f"{collector.origin}/api/1", allowed_hosts=allowing(sim.api_url, sim.iam_url)
    )
    with pytest.raises(HostNotAllowed) as caught:
        client.current_user()
    assert collector.received == []
    assert not caught.value.retryable
    assert caught.value.operation == "getCurrentUserInfo"
    assert "credential not sent" in str(caught.value)
    assert "use https" in str(caught.value)


def test_credential_is_not_sent_to_an_iam_url_not_allowed(
    make_client: MakeClient, http_stub: MakeStub, sim: WhiteskySimulator
) -> None:
    collector = http_stub(Reply(200, make_jwt(2_000_000_000).encode()))
    sim.configure(token_ttl=30)  # within the refresh margin: refreshed before the call
    client = make_client(
        iam_url=collector.origin, allowed_hosts=allowing(sim.api_url), token=sim.token()
    )
    assert client.current_user()  # the token is still valid: used as it is
    sim.fault(operation="getCurrentUserInfo", status=401, times=1)
    with pytest.raises(HostNotAllowed) as caught:
        client.current_user()  # a 401 asks for a refresh, which is not sent
    assert caught.value.operation == "refreshJWT"
    assert collector.received == []


def test_credential_is_sent_to_an_allowed_host(client: WhiteskyClient) -> None:
    assert client.current_user().customer_ids


# --- redirects -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_not_followed_and_the_error_names_status_and_host(
    make_client: MakeClient, http_stub: MakeStub, status: int
) -> None:
    collector = http_stub(Reply(200, b"{}"))
    redirector = http_stub(redirect(status, f"{collector.origin}/collect?from=whitesky"))
    client = make_client(api_url=f"{redirector.origin}/api/1")
    with pytest.raises(WhiteskyError) as caught:
        client.current_user()
    assert collector.received == []
    assert len(redirector.received) == 1  # not retried either
    assert not caught.value.retryable
    assert caught.value.status == status
    assert f"redirected to {collector.origin.removeprefix('http://')}" in str(caught.value)
    assert "collect" not in str(caught.value)


def test_redirect_of_the_token_refresh_is_not_followed(
    make_client: MakeClient, http_stub: MakeStub, sim: WhiteskySimulator
) -> None:
    collector = http_stub(Reply(200, make_jwt(2_000_000_000).encode()))
    iam = http_stub(redirect(302, f"{collector.origin}/v1/oauth/jwt/refresh"))
    client = make_client(iam_url=iam.origin, api_url=sim.api_url)
    sim.fault(operation="getCurrentUserInfo", status=401, times=1)
    with pytest.raises(Unauthorized) as caught:
        client.current_user()
    assert collector.received == []
    assert "redirected to" in str(caught.value)


# --- what an answer may put into a message ---------------------------------------------


def test_html_error_page_is_not_shown(make_client: MakeClient, http_stub: MakeStub) -> None:
    proxy = http_stub(html(502, PAGE))
    client = make_client(api_url=f"{proxy.origin}/api/1")
    with pytest.raises(Unavailable) as caught:
        client.current_user()
    assert_short_and_foreign_free(caught.value)
    assert "Bad Gateway" in str(caught.value)
    assert "text/html answer not shown" in str(caught.value)


def test_html_error_page_of_a_write_is_not_shown(
    make_client: MakeClient, http_stub: MakeStub
) -> None:
    proxy = http_stub(html(400, PAGE))
    client = make_client(api_url=f"{proxy.origin}/api/1")
    with pytest.raises(BadRequest) as caught:
        client.reserve_vgpu(location="nl", gpu_id="g", name="v")
    assert_short_and_foreign_free(caught.value)


def test_html_success_page_is_not_shown(make_client: MakeClient, http_stub: MakeStub) -> None:
    portal = http_stub(html(200, PAGE))
    client = make_client(api_url=f"{portal.origin}/api/1")
    with pytest.raises(UnexpectedResponse) as caught:
        client.current_user()
    assert_short_and_foreign_free(caught.value)
    assert "not JSON" in str(caught.value)


def test_html_answer_to_a_token_refresh_is_not_shown(
    make_client: MakeClient, http_stub: MakeStub, sim: WhiteskySimulator
) -> None:
    iam = http_stub(html(500, PAGE))
    client = make_client(iam_url=iam.origin)
    sim.fault(operation="getCurrentUserInfo", status=401, times=1)
    with pytest.raises(Unauthorized) as caught:
        client.current_user()
    assert_short_and_foreign_free(caught.value)


def test_whitesky_message_is_kept_short_and_on_one_line(
    make_client: MakeClient, http_stub: MakeStub
) -> None:
    long = "cloudspace is\nbusy\r\n\u202e" + "x" * 5000
    body = json.dumps({"message": long}).encode()
    vco = http_stub(Reply(409, body, {"Content-Type": "application/json"}))
    client = make_client(api_url=f"{vco.origin}/api/1")
    with pytest.raises(WhiteskyError) as caught:
        client.start_vm(cloudspace_id="cs", vm_id=1)
    assert caught.value.message.startswith("cloudspace is busy x")
    assert len(caught.value.message) <= 200
    assert "\u202e" not in caught.value.message
    assert_short_and_foreign_free(caught.value)


@pytest.mark.parametrize(
    "body", [b'{"error": "<b>page</b>"}', b"[1, 2]", b'{"message": 7}', b"not json"]
)
def test_an_answer_without_a_whitesky_message_says_only_the_status(
    make_client: MakeClient, http_stub: MakeStub, body: bytes
) -> None:
    vco = http_stub(Reply(404, body, {"Content-Type": "application/json"}))
    client = make_client(api_url=f"{vco.origin}/api/1")
    with pytest.raises(WhiteskyError) as caught:
        client.current_user()
    assert "Not Found" in caught.value.message
    assert body.decode() not in caught.value.message and "page" not in caught.value.message
