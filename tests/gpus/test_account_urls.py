"""The finding this guards against: an account's URL pointed at a host of someone's
choosing made the worker send the account's JWT there, and the reply came back readable in
a machine's failure message. Against the simulator and real local HTTP servers."""

from __future__ import annotations

from typing import Any

from capvco_web.audit import SystemActor
from cloud.models import Account
from cloud.services import account_update
from clusters.models import Machine
from tests.gpus.conftest import NL, Plane
from tests.http_stub import html

PAGE = "Thanks for the token"


def test_machine_of_an_account_pointing_elsewhere_sends_its_jwt_nowhere(
    plane: Plane, http_stub: Any
) -> None:
    cluster = plane.cluster(sites=(NL,))
    plane.pool(cluster, "cpu")
    collector = http_stub(html(200, PAGE))
    Account.objects.filter(pk=plane.account.pk).update(
        api_url=f"{collector.origin}/api/1", iam_url=collector.origin
    )
    plane.account.refresh_from_db()

    plane.reconcile(cluster)

    assert collector.received == []
    machine = Machine.objects.get()
    assert "credential not sent" in machine.failure_message
    assert plane.sim_vms() == []


def test_machine_failure_from_an_allowed_host_answering_html_shows_no_html(
    plane: Plane, http_stub: Any, settings: Any
) -> None:
    cluster = plane.cluster(sites=(NL,))
    plane.pool(cluster, "cpu")
    proxy = http_stub(html(502, PAGE))
    settings.WHITESKY_ALLOWED_HOSTS = [*settings.WHITESKY_ALLOWED_HOSTS, proxy.origin]
    account_update(
        account=plane.account,
        changes={"api_url": f"{proxy.origin}/api/1", "credential": plane.account.credential},
        actor=SystemActor.RECONCILER,
    )

    plane.reconcile(cluster)

    assert proxy.received  # it was asked: an allowed host
    message = Machine.objects.get().failure_message
    assert message
    assert PAGE not in message and "<" not in message and "\n" not in message
    assert "Bad Gateway" in message
