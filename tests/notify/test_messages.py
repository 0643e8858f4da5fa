"""What a receiver gets, held to clients nobody here wrote: every kind of message verifies
with the standardwebhooks library, through a secret's rotation too, and a Slack body is
escaped as Slack's message format requires."""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from standardwebhooks import Webhook, WebhookVerificationError

from clusters.models import Machine
from notify.models import Reason, WebhookTarget
from notify.services import (
    notify_pass,
    webhook_target_create,
    webhook_target_test,
    webhook_target_update,
)
from tests.factories import (
    AccountFactory,
    LocationFactory,
    MachineFactory,
    MembershipFactory,
    VirtualMachineFactory,
)
from tests.notify.test_webhooks import NEXT_SECRET, SECRET, Receiver

pytestmark = pytest.mark.django_db


def _admin(account: Any) -> Any:
    return MembershipFactory(account=account, role="admin", user__is_staff=True).user


def _created(receiver: Receiver, account: Any, **fields: Any) -> WebhookTarget:
    fields.setdefault("secret", SECRET)
    fields.setdefault("reasons", [Reason.MACHINE_FAILED])  # the factories' locations are stale
    target = WebhookTarget(account=account, name="ops", url=receiver.url, **fields)
    return webhook_target_create(target=target, actor=_admin(account))


def _verify(secret: str, post: dict[str, Any]) -> Any:
    return Webhook(secret).verify(post["body"], post["headers"])


def test_every_kind_of_message_verifies_with_the_standard_webhooks_library(
    receiver: Receiver, run_tasks: Any
) -> None:
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    account = machine.pool.cluster.account
    json_target = _created(receiver, account, reasons=[Reason.MACHINE_FAILED])
    slack_target = WebhookTarget(account=account, name="chat", url=receiver.url, secret=SECRET)
    slack_target.kind = WebhookTarget.Kind.SLACK
    slack_target.reasons = [Reason.MACHINE_FAILED]
    webhook_target_create(target=slack_target, actor=_admin(account))

    notify_pass()
    with run_tasks():  # a test message is posted by a worker
        webhook_target_test(target=json_target, actor=_admin(account))

    bodies = [_verify(SECRET, post) for post in receiver.posts]
    assert sorted(next(iter(b)) if "text" in b else b["reason"] for b in bodies) == [
        "machine_failed", "test", "text",
    ]  # fmt: skip
    ids = [post["headers"]["webhook-id"] for post in receiver.posts]
    assert len(set(ids)) == 3 and all(i.startswith("msg_") for i in ids)
    with pytest.raises(WebhookVerificationError):
        _verify(NEXT_SECRET, receiver.posts[0])


def test_a_post_sent_again_after_a_lost_answer_keeps_its_id(receiver: Receiver) -> None:
    receiver.answers = [503]
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    _created(receiver, machine.pool.cluster.account)
    now = timezone.now()

    notify_pass(now=now)
    notify_pass(now=now + timedelta(seconds=31))

    first, again = receiver.posts
    assert _verify(SECRET, first) == _verify(SECRET, again)
    assert first["headers"]["webhook-id"] == again["headers"]["webhook-id"]
    assert first["headers"]["webhook-timestamp"] != again["headers"]["webhook-timestamp"]


def test_while_a_secret_rotates_messages_verify_with_the_old_and_the_new(
    receiver: Receiver,
) -> None:
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    account = machine.pool.cluster.account
    target = _created(receiver, account)
    webhook_target_update(target=target, changes={"secret": NEXT_SECRET}, actor=_admin(account))

    notify_pass()
    MachineFactory(phase=Machine.Phase.FAILED, pool=machine.pool)
    notify_pass(now=timezone.now() + timedelta(days=2))

    during, after = receiver.posts
    assert during["headers"]["webhook-signature"].count("v1,") == 2
    assert _verify(SECRET, during) == _verify(NEXT_SECRET, during)
    # A day later the old secret signs nothing.
    signed_at = datetime.fromtimestamp(int(after["headers"]["webhook-timestamp"]), tz=UTC)
    message = (after["headers"]["webhook-id"], signed_at, after["body"])
    assert after["headers"]["webhook-signature"] == Webhook(NEXT_SECRET).sign(*message)


def test_the_old_headers_still_verify_during_the_move(receiver: Receiver) -> None:
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    _created(receiver, machine.pool.cluster.account)

    notify_pass()

    headers, body = receiver.posts[0]["headers"], receiver.posts[0]["body"]
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    mac = hmac.new(key, f"{headers['X-Capvco-Timestamp']}.{body}".encode(), hashlib.sha256)
    assert headers["X-Capvco-Signature"] == f"sha256={mac.hexdigest()}"


@pytest.mark.parametrize(
    "secret",
    ["plain words", "whsec_not*base64", "whsec_" + base64.b64encode(b"short").decode()],
)
def test_a_secret_not_in_the_standard_form_is_refused_saying_how_to_make_one(
    receiver: Receiver, secret: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        _created(receiver, AccountFactory(), secret=secret)

    assert "whsec_" in str(refused.value) and "openssl rand -base64 32" in str(refused.value)


NAME = "<!channel> <https://x.example|docs> & more"


def test_a_slack_body_escapes_what_slack_reads_as_mentions_and_links(receiver: Receiver) -> None:
    location = LocationFactory(name="nl-ams-dc01")
    VirtualMachineFactory(
        location=location, name=NAME, orphaned_since=timezone.now(), orphan_reason="no machine"
    )
    _created(receiver, location.account, kind=WebhookTarget.Kind.SLACK, reasons=[Reason.VM_ORPHAN])

    notify_pass()

    (text,) = [body["text"] for body in receiver.bodies()]
    # Slack reads <...> as a mention or a link; it reads &amp; &lt; &gt; back as & < >.
    assert "<" not in text and ">" not in text
    assert "&lt;!channel&gt; &lt;https://x.example|docs&gt; &amp; more" in text
    assert NAME in html.unescape(text)
