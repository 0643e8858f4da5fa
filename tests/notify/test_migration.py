"""Targets saved before URLs were credentials and posts Standard Webhooks: a database with
rows of the old schema is migrated forward, and its URLs, audit records (receivers' answers
included), secrets and notices come out as new ones are."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from capvco_web.models import AuditEvent
from notify.models import Notice, WebhookTarget, secret_key
from notify.send import legacy_signature
from tests.factories import AccountFactory

BEFORE = [("notify", "0003_reasons_idle_gpus_and_unexplained_bill")]
OLD_URL = "https://hooks.slack.example/services/T0001/B0002/Xq9uUvk3NLzPp4rS1tH8cYwD"
NEW_URL = "https://hooks.slack.example/services/T0001/B0002/Zz8yYxw2MKyOo3qR0sG7bXvC"
OTHER_URL = "https://hooks.other.example/x"
LEGACY_SECRET = "legacy-secret-4f1c"


def _old_rows(apps: Any, account_id: int) -> dict[str, Any]:
    get = apps.get_model
    target = get("notify", "WebhookTarget").objects.create(
        account_id=account_id, name="chat", url=NEW_URL, kind="slack", secret=LEGACY_SECRET
    )
    for key in ("1", "2"):
        get("notify", "Notice").objects.create(
            target=target, reason="machine_failed", key=key, summary="s", opened_at=timezone.now()
        )
    events = get("capvco_web", "AuditEvent").objects
    common = {"actor_name": "alice", "object_type": "notify.WebhookTarget"}
    common |= {"object_id": str(target.pk), "object_repr": "chat", "account_id": account_id}
    return {
        "create": events.create(action="webhook_target.create", after={"url": OLD_URL}, **common),
        "path": events.create(
            action="webhook_target.update",
            before={"url": OLD_URL},
            after={"url": NEW_URL},
            **common,
        ),
        "host": events.create(
            action="webhook_target.update",
            before={"url": OTHER_URL, "name": "a"},
            after={"url": NEW_URL, "name": "chat"},
            **common,
        ),
        # What a receiver answered, as posts were audited before: readable by every member.
        "tested": events.create(
            action="webhook_target.test", after={"result": "HTTP 503"}, **common
        ),
        "sent": events.create(
            action="notice.send", after={"result": "no answer: ConnectTimeout"}, **common
        ),
        "taken": events.create(action="notice.send", after={"result": "sent"}, **common),
        "target": target.pk,
    }


@pytest.mark.django_db(transaction=True)
def test_old_urls_audit_records_secrets_and_notices_are_brought_forward() -> None:
    account = AccountFactory()
    MigrationExecutor(connection).migrate(BEFORE)
    old = _old_rows(MigrationExecutor(connection).loader.project_state(BEFORE).apps, account.pk)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    target = WebhookTarget.objects.get(pk=old["target"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT url FROM notify_webhooktarget WHERE id = %s", [target.pk])
        (stored,) = cursor.fetchone()
    assert "hooks.slack.example" not in stored and target.url == NEW_URL
    shown = {name: AuditEvent.objects.get(pk=old[name].pk) for name in ("create", "path", "host")}
    assert shown["create"].after == {"url": "https://hooks.slack.example/…"}
    assert (shown["path"].before, shown["path"].after) == (
        {"url": "https://hooks.slack.example/…"},
        {"url": "https://hooks.slack.example/… (changed)"},
    )
    assert (shown["host"].before, shown["host"].after) == (
        {"url": "https://hooks.other.example/…", "name": "a"},
        {"url": "https://hooks.slack.example/…", "name": "chat"},
    )
    # The same key: a receiver checking the old header goes on verifying.
    assert target.secret.startswith("whsec_")
    assert secret_key(target.secret) == LEGACY_SECRET.encode()
    mac = hmac.new(LEGACY_SECRET.encode(), b"17.{}", hashlib.sha256).hexdigest()
    assert legacy_signature(target.secret, "17", "{}") == f"sha256={mac}"
    ids = set(Notice.objects.filter(target=target).values_list("message_id", flat=True))
    assert len(ids) == 2 and None not in ids
    results = {
        name: AuditEvent.objects.get(pk=old[name].pk).after["result"]
        for name in ("tested", "sent", "taken")
    }
    assert results == {"tested": "failed", "sent": "failed", "taken": "sent"}
