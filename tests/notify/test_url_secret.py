"""A webhook URL is a credential (a Slack incoming-webhook URL is how one posts to the
channel): stored encrypted, shown and audited as its scheme and host only, to the admins
who change it as to the viewers who read the audit log."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from capvco_web.models import AuditEvent
from notify.models import Reason, WebhookTarget
from tests.factories import MembershipFactory
from tests.notify.test_webhooks import SECRET, Receiver

pytestmark = pytest.mark.django_db

TOKEN = "T0001/B0002/Xq9uUvk3NLzPp4rS1tH8cYwD"  # what makes a Slack URL a credential


def _form(account: Any, url: str) -> dict[str, Any]:
    return {
        "account": account.pk, "name": "chat", "url": url, "kind": "slack", "enabled": "on",
        "reasons": list(Reason.values), "per_minute": 30, "new_secret": SECRET,
    }  # fmt: skip


def test_a_target_url_is_seen_by_nobody_only_its_scheme_and_host(
    receiver: Receiver, caplog: pytest.LogCaptureFixture, run_tasks: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    origin = receiver.url.removesuffix("/hooks/capvco")
    admin_membership = MembershipFactory(role="admin", user__is_staff=True)
    account = admin_membership.account
    admin = Client()
    admin.force_login(admin_membership.user)

    added = admin.post("/admin/notify/webhooktarget/add/", _form(account, f"{origin}/a/{TOKEN}"))
    target = WebhookTarget.objects.get()
    change = f"/admin/notify/webhooktarget/{target.pk}/change/"
    changed = admin.post(change, _form(account, f"{origin}/b/{TOKEN}"))
    renamed = admin.post(change, {**_form(account, ""), "name": "chat-2"})  # the URL kept
    with run_tasks():  # a test message is posted by a worker
        tested = admin.post(f"/notifications/{target.pk}/test/", follow=True)

    assert [added.status_code, changed.status_code, renamed.status_code] == [302, 302, 302]
    target.refresh_from_db()
    assert (target.name, target.url) == ("chat-2", f"{origin}/b/{TOKEN}")
    assert [post["body"] for post in receiver.posts] and tested.status_code == 200
    viewer = Client()
    viewer.force_login(MembershipFactory(account=account, role="viewer", user__is_staff=True).user)
    pages = {
        "admin list": admin.get("/admin/notify/webhooktarget/"),
        "admin change": admin.get(change),
        "notifications": admin.get("/notifications/"),
        "audit, admin": admin.get("/audit/"),
        "audit, viewer": viewer.get("/audit/"),
        "admin audit, viewer": viewer.get("/admin/capvco_web/auditevent/"),
    }
    assert {name: page.status_code for name, page in pages.items()} == dict.fromkeys(pages, 200)
    shown = {name: page.content.decode() for name, page in pages.items()}
    records = [
        [e.before, e.after] for e in AuditEvent.objects.filter(object_type__startswith="notify")
    ]
    shown["audit records"] = json.dumps(records)
    shown["logs"] = caplog.text
    assert {name for name, text in shown.items() if TOKEN in text} == set()
    assert f"{origin}/…" in shown["notifications"] and f"{origin}/…" in shown["audit, viewer"]
    # The change from /a/ to /b/ is in the log, as a change, without either path.
    update = AuditEvent.objects.get(action="webhook_target.update", after__has_key="url")
    assert (update.before["url"], update.after["url"]) == (f"{origin}/…", f"{origin}/… (changed)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT url FROM notify_webhooktarget")
        (stored,) = cursor.fetchone()
    assert TOKEN not in stored and "127.0.0.1" not in stored
