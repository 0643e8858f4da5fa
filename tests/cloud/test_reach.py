"""An account's whitesky out of reach shows as itself: /readyz and the overview's system
panel fail `whitesky`, naming the account, the host its calls go to and its locations,
while `beat` and `workers` stay fine; a blip shorter than two observe intervals does not;
the first answer after it clears it.

Real parts: the whitesky simulator behind a TCP proxy (tests/servers.py) that refuses every
connection, or holds it open and silent, and the simulator's own 503."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.test import Client
from pytest_django.fixtures import Settings

from capvco_web.integrations import whitesky as ws
from capvco_web.tasks import BEAT, WORKERS
from cloud.models import Account
from cloud.observe import account_locations_observe
from cloud.whitesky import whitesky_client
from tests.factories import HeartbeatFactory
from tests.servers import TcpProxy
from tests.whitesky_sim import WhiteskySimulator, whitesky_host_allow

pytestmark = pytest.mark.django_db


@pytest.fixture
def proxy(whitesky_sim: WhiteskySimulator) -> Iterator[TcpProxy]:
    between = TcpProxy(int(whitesky_sim.base_url.rsplit(":", 1)[1]))
    whitesky_host_allow(between.origin)
    yield between
    between.close()


@pytest.fixture
def account(whitesky_sim: WhiteskySimulator, proxy: TcpProxy) -> Account:
    """An account whose calls go through the proxy, its locations observed (answered)."""
    account = Account.objects.create(
        name="north",
        api_url=f"{proxy.origin}/api/1",
        iam_url=proxy.origin,
        customer_id=whitesky_sim.customer_id,
        credential=whitesky_sim.token(),
    )
    with whitesky_client(account) as client:
        account_locations_observe(client=client, account=account)
    return account


def whitesky_call(account: Account) -> None:
    """A call of a pass (its time bounded): the listing of the account's locations."""
    with whitesky_client(account, seconds=1.5) as client:
        client.list_locations()


def checks(client: Client) -> dict[str, dict[str, str]]:
    body: dict[str, dict[str, dict[str, str]]] = client.get("/readyz").json()
    return body["checks"]


@pytest.mark.parametrize("fault", ["refuse", "hold", "503"])
def test_whitesky_out_of_reach_fails_readiness_naming_it_not_beat(
    admin_client: Client,
    settings: Settings,
    whitesky_sim: WhiteskySimulator,
    proxy: TcpProxy,
    account: Account,
    fault: str,
) -> None:
    HeartbeatFactory(name=BEAT)
    HeartbeatFactory(name=WORKERS)
    assert admin_client.get("/readyz").status_code == 200

    if fault == "503":
        whitesky_sim.fault(operation="listLocations", status=503, times=10)
    else:
        proxy.set(fault)
    with pytest.raises(ws.WhiteskyError):
        whitesky_call(account)

    # Within two observe intervals of its last answer: a blip, not an outage.
    assert checks(admin_client)["whitesky"] == {"status": "ok", "detail": "ok"}

    settings.OBSERVE_INTERVAL = timedelta(seconds=0.05)
    time.sleep(0.2)
    response = admin_client.get("/readyz")
    assert response.status_code == 503
    found = response.json()["checks"]
    assert found["whitesky"]["status"] == "fail"
    how = "HTTP 503" if fault == "503" else "no answer"
    locations = ", ".join(account.locations.order_by("name").values_list("name", flat=True))
    assert found["whitesky"]["detail"].startswith(
        f"RuntimeError: not answering: north at {proxy.origin} (locations {locations}): "
        "no answer for "
    ), found
    assert found["whitesky"]["detail"].endswith(f"s (last call listLocations: {how})"), found
    assert found["beat"]["status"] == found["workers"]["status"] == "ok"
    # The overview's system panel says the same, to staff.
    panel = admin_client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="system-status")
    html = panel.content.decode()
    assert "<td>whitesky</td>" in html and f"north at {proxy.origin}" in html

    proxy.set("pass")
    whitesky_sim.clear_faults()
    whitesky_call(account)
    assert admin_client.get("/readyz").status_code == 200


def test_an_account_that_never_answered_fails_at_once(
    admin_client: Client, whitesky_sim: WhiteskySimulator, proxy: TcpProxy
) -> None:
    proxy.set("refuse")
    account = Account.objects.create(
        name="south",
        api_url=f"{proxy.origin}/api/1",
        customer_id=whitesky_sim.customer_id,
        credential=whitesky_sim.token(),
    )
    with pytest.raises(ws.WhiteskyError):
        whitesky_call(account)
    detail = checks(admin_client)["whitesky"]["detail"]
    assert f"south at {proxy.origin}: never answered (last call listLocations: no answer)" in (
        detail
    )
