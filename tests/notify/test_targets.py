"""Adding and changing webhook targets in the admin, as an account admin does: what the form
offers, what it refuses and how it says so."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from capvco_web.models import AuditEvent
from notify.models import Reason, WebhookTarget
from tests.factories import MembershipFactory
from tests.notify.test_webhooks import SECRET, Receiver

pytestmark = pytest.mark.django_db

ADD = "/admin/notify/webhooktarget/add/"


def _admin_client() -> tuple[Client, Any]:
    membership = MembershipFactory(role="admin", user__is_staff=True)
    client = Client()
    client.force_login(membership.user)
    return client, membership.account


def _form(account: Any, url: str, **fields: Any) -> dict[str, Any]:
    return {
        "account": account.pk, "name": "ops", "url": url, "kind": "json", "enabled": "on",
        "reasons": list(Reason.values), "per_minute": 30, "new_secret": SECRET, **fields,
    }  # fmt: skip


def test_a_new_target_offers_every_reason_ticked_and_takes_them(receiver: Receiver) -> None:
    client, account = _admin_client()

    page = client.get(ADD).content.decode()
    ticked = re.findall(r'<input type="checkbox" name="reasons" value="(\w+)"[^>]*checked', page)
    answer = client.post(ADD, _form(account, receiver.url))

    assert sorted(ticked) == sorted(Reason.values)
    assert answer.status_code == 302, answer.content.decode()
    target = WebhookTarget.objects.get()
    assert sorted(target.reasons) == sorted(Reason.values)
    assert AuditEvent.objects.filter(action="webhook_target.create", object_id=str(target.pk))


def test_a_target_with_no_reason_is_refused_in_the_form_not_with_a_500(
    receiver: Receiver,
) -> None:
    client, account = _admin_client()

    answer = client.post(ADD, _form(account, receiver.url, reasons=[]))

    assert answer.status_code == 200
    assert "Tick at least one reason" in answer.content.decode()
    assert not WebhookTarget.objects.exists()


def test_a_refused_url_is_a_form_error_naming_the_setting_and_the_entry_to_add(
    settings: Any,
) -> None:
    settings.NOTIFY_WEBHOOK_HOSTS = []
    client, account = _admin_client()

    answer = client.post(ADD, _form(account, "http://127.0.0.1:8090/hook"))
    shown = answer.content.decode()

    assert answer.status_code == 200
    assert "NOTIFY_WEBHOOK_HOSTS" in shown and "list http://127.0.0.1:8090 there" in shown
    assert "whitesky hosts" not in shown
    assert not WebhookTarget.objects.exists()


def test_a_bare_host_in_the_allow_list_admits_its_default_port_only(settings: Any) -> None:
    settings.NOTIFY_WEBHOOK_HOSTS = ["hooks.example"]
    client, account = _admin_client()

    other_port = client.post(ADD, _form(account, "https://hooks.example:8443/x"))
    default_port = client.post(ADD, _form(account, "https://hooks.example/x"))

    assert other_port.status_code == 200
    assert (
        "hooks.example:8443 is not in NOTIFY_WEBHOOK_HOSTS (an entry without a port allows port "
        "443 only: list https://hooks.example:8443 to allow that port)"
    ) in other_port.content.decode()
    assert default_port.status_code == 302
    assert WebhookTarget.objects.get().url == "https://hooks.example/x"
