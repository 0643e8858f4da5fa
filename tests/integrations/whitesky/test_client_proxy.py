"""The client ignores the proxy variables of the environment (HTTP_PROXY, HTTPS_PROXY,
ALL_PROXY): a credential goes through a proxy only when the operator named one for
whitesky (WHITESKY_PROXY_URL). Against a real local listener posing as the proxy."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from capvco_web.environment import whitesky_proxy_url
from capvco_web.integrations.whitesky import WhiteskyClient
from cloud.models import Account
from cloud.whitesky import whitesky_client
from tests.http_stub import HttpStub, Reply
from tests.whitesky_sim import WhiteskySimulator

MakeClient = Callable[..., WhiteskyClient]
MakeStub = Callable[[Reply], HttpStub]
ME = {"username": "proxy", "customers": [{"customer_id": "proxy-customer", "name": "p"}]}


@pytest.fixture
def proxy(http_stub: MakeStub) -> HttpStub:
    return http_stub(Reply(200, json.dumps(ME).encode(), {"Content-Type": "application/json"}))


def proxy_environment(monkeypatch: pytest.MonkeyPatch, proxy: HttpStub) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, proxy.origin)


def test_proxy_variables_of_the_environment_get_nothing(
    make_client: MakeClient,
    proxy: HttpStub,
    sim: WhiteskySimulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = make_client(token=sim.token())
    proxy_environment(monkeypatch, proxy)
    me = client.current_user()
    monkeypatch.undo()  # the simulator's control calls of the test go straight
    sim.configure(token_ttl=30)  # within the refresh margin: the next call refreshes first
    refreshed: list[str] = []
    refreshing = make_client(token=sim.token(), on_token_refreshed=refreshed.append)
    proxy_environment(monkeypatch, proxy)

    refreshing.current_user()  # the token refresh too

    assert sim.customer_id in me.customer_ids  # whitesky answered, not the listener
    assert proxy.received == []
    assert len(refreshed) == 1  # refreshed, straight from the IAM


def test_an_explicit_proxy_is_used_for_every_call(
    make_client: MakeClient, proxy: HttpStub, sim: WhiteskySimulator
) -> None:
    client = make_client(proxy_url=proxy.origin)

    me = client.current_user()

    assert me.customer_ids == ("proxy-customer",)
    assert [r.path for r in proxy.received] == [f"{sim.api_url}/me"]


def test_the_accounts_client_takes_the_proxy_from_its_setting_only(
    proxy: HttpStub, sim: WhiteskySimulator, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = Account(
        name="a", api_url=sim.api_url, iam_url=sim.iam_url, customer_id=sim.customer_id,
        credential=sim.token(),
    )  # fmt: skip
    proxy_environment(monkeypatch, proxy)
    with whitesky_client(account) as client:
        assert sim.customer_id in client.current_user().customer_ids
    assert proxy.received == []

    settings.WHITESKY_PROXY_URL = proxy.origin
    with whitesky_client(account) as client:
        assert client.current_user().customer_ids == ("proxy-customer",)
    assert len(proxy.received) == 1


@pytest.mark.parametrize(
    "value",
    ["socks5://user:pw@proxy:1080", "proxy:3128", "http://", "http://proxy:port", "http://proxy/x",
     "http://proxy:3128?x=1"],
)  # fmt: skip
def test_a_proxy_setting_that_is_not_an_http_proxy_url_is_refused(value: str) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        whitesky_proxy_url(value)
    assert "WHITESKY_PROXY_URL" in str(refused.value)
    assert "pw@" not in str(refused.value)  # a proxy URL may carry its password


def test_a_proxy_setting_names_a_proxy_or_nothing() -> None:
    assert whitesky_proxy_url(" ") == ""
    assert whitesky_proxy_url("http://user:pw@proxy.internal:3128") == (
        "http://user:pw@proxy.internal:3128"
    )
