"""Sending without holding anyone up: a test message is a worker's task (the request answers
before the post, the row shows the result when it comes), throttled per target and per
account; an account has a bounded number of targets; and what a receiver answered is for the
account's admins only, never in the audit log every member reads. A real HTTP receiver in a
thread takes the posts."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import Client

from capvco_web.models import AuditEvent
from clusters.models import Machine
from notify.models import Reason, WebhookTarget
from notify.services import notify_pass
from tests.factories import AccountFactory, MachineFactory, MembershipFactory

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@dataclass
class Receiver:
    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    # Cleared: each post waits (at most 5 s) until it is set.
    gate: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    found = Receiver(url="")
    found.gate.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            found.gate.wait(5)
            found.posts.append({"path": self.path, "body": json.loads(body)})
            status = found.answers.pop(0) if found.answers else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    origin = f"http://127.0.0.1:{server.server_port}"
    settings.NOTIFY_WEBHOOK_HOSTS = [origin]
    found.url = f"{origin}/hooks/capvco"
    yield found
    found.gate.set()
    server.shutdown()
    server.server_close()


def _target(receiver: Receiver, account: Any, name: str = "ops") -> WebhookTarget:
    target = WebhookTarget(
        account=account, name=name, url=f"{receiver.url}/{name}", reasons=[Reason.MACHINE_FAILED]
    )
    target.full_clean()
    target.save()
    return target


def _admin_client(account: Any, *, staff: bool = False) -> Client:
    client = Client()
    client.force_login(MembershipFactory(account=account, role="admin", user__is_staff=staff).user)
    return client


def _poll_url(fragment: str) -> str:
    start = fragment.index('hx-get="') + len('hx-get="')
    return fragment[start : fragment.index('"', start)]


def test_a_test_answers_before_its_post_and_its_row_shows_the_result_when_it_comes(
    receiver: Receiver,
    django_capture_on_commit_callbacks: Any,
    run_tasks: Callable[[], AbstractContextManager[None]],
) -> None:
    target = _target(receiver, AccountFactory())
    client = _admin_client(target.account)
    receiver.gate.clear()  # the receiver answers only when the test lets it

    with django_capture_on_commit_callbacks() as sent:
        answer = client.post(f"/notifications/{target.pk}/test/", headers=HTMX)
    fragment = answer.content.decode()

    assert answer.status_code == 200 and receiver.posts == []  # answered before any post
    assert "waiting for a worker" in fragment and 'hx-trigger="every 1s"' in fragment
    waiting = client.get(_poll_url(fragment), headers=HTMX)
    assert waiting.status_code == 200 and "waiting for a worker" in waiting.content.decode()
    receiver.gate.set()
    with run_tasks():
        for callback in sent:
            callback()  # the task, as the worker runs it
    done = client.get(_poll_url(fragment), headers=HTMX)
    assert [post["body"]["reason"] for post in receiver.posts] == ["test"]
    # 286: htmx shows the result and stops asking.
    assert done.status_code == 286 and "sent" in done.content.decode()
    assert "hx-get" not in done.content.decode()
    page = client.get("/notifications/").content.decode()
    assert f'id="test-result-{target.pk}" class="ok"' in page
    assert AuditEvent.objects.filter(action="webhook_target.test").count() == 1


def test_tests_are_throttled_per_target_and_per_account_from_the_page_and_the_admin(
    receiver: Receiver, settings: Any
) -> None:
    settings.NOTIFY_TESTS_PER_ACCOUNT_MINUTE = 3
    account = AccountFactory(name="acme")
    targets = [_target(receiver, account, f"ops-{n}") for n in range(4)]
    client = _admin_client(account, staff=True)

    first = client.post(f"/notifications/{targets[0].pk}/test/", headers=HTMX)
    again = client.post(f"/notifications/{targets[0].pk}/test/", headers=HTMX)
    bulk = client.post(
        "/admin/notify/webhooktarget/",
        {"action": "send_test", "_selected_action": [t.pk for t in targets[1:]]},
        follow=True,
    )
    plain = client.post(f"/notifications/{targets[3].pk}/test/", follow=True)

    assert "waiting for a worker" in first.content.decode()
    assert "A test message to ops-0 is under way" in again.content.decode()
    shown = bulk.content.decode()
    assert "Test messages on their way to ops-1, ops-2" in shown
    assert (
        "No test message to ops-3: 3 test messages of account acme in the last minute, the most "
        "NOTIFY_TESTS_PER_ACCOUNT_MINUTE allows" in shown
    )
    assert plain.redirect_chain == [("/notifications/", 302)]
    assert "NOTIFY_TESTS_PER_ACCOUNT_MINUTE" in plain.content.decode()
    assert receiver.posts == []  # none in a request: the worker posts them
    # Another account has its own minute.
    other = _target(receiver, AccountFactory())
    answer = _admin_client(other.account).post(f"/notifications/{other.pk}/test/", headers=HTMX)
    assert "waiting for a worker" in answer.content.decode()


def test_an_account_has_at_most_its_bound_of_targets_with_a_clear_error(
    receiver: Receiver, settings: Any
) -> None:
    settings.NOTIFY_TARGETS_PER_ACCOUNT = 2
    account = AccountFactory()
    _target(receiver, account, "ops-0")
    _target(receiver, account, "ops-1")
    client = _admin_client(account, staff=True)

    answer = client.post(
        "/admin/notify/webhooktarget/add/",
        {
            "account": account.pk, "name": "ops-2", "url": f"{receiver.url}/ops-2",
            "kind": "json", "enabled": "on", "reasons": ["machine_failed"], "per_minute": 30,
        },
    )  # fmt: skip

    assert answer.status_code == 200
    assert (
        "The account has 2 webhook targets, the most NOTIFY_TARGETS_PER_ACCOUNT allows"
        in answer.content.decode()
    )
    assert WebhookTarget.objects.filter(account=account).count() == 2
    _target(receiver, AccountFactory(), "ops-2")  # another account's bound is its own


def test_what_a_receiver_answered_is_shown_to_the_accounts_admins_only(
    receiver: Receiver,
    settings: Any,
    run_tasks: Callable[[], AbstractContextManager[None]],
) -> None:
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    account = machine.pool.cluster.account
    notified = _target(receiver, account, "ops")
    # Nothing listens there: the post finds the port closed.
    closed = WebhookTarget(account=account, name="closed", url="http://127.0.0.1:9/x")
    settings.NOTIFY_WEBHOOK_HOSTS = [*settings.NOTIFY_WEBHOOK_HOSTS, "http://127.0.0.1:9"]
    closed.full_clean()
    closed.save()
    receiver.answers = [500]
    notify_pass()
    admin = _admin_client(account, staff=True)
    with run_tasks():
        admin.post(f"/notifications/{closed.pk}/test/", headers=HTMX)
        admin.post(f"/notifications/{notified.pk}/test/", headers=HTMX)

    details = ("HTTP 500", "no answer", "ConnectionError")
    for role in ("viewer", "operator", "admin"):
        member = Client()
        member.force_login(MembershipFactory(account=account, role=role, user__is_staff=True).user)
        audit = member.get("/audit/").content.decode()
        listed = member.get("/admin/capvco_web/auditevent/").content.decode()
        assert "notice.send" in audit and "webhook_target.test" in audit
        assert not [d for d in details if d in audit or d in listed], role
    records = json.dumps([[e.before, e.after] for e in AuditEvent.objects.all()])
    assert not [d for d in details if d in records]
    # The admins read it where they read the targets.
    page = admin.get("/notifications/").content.decode()
    assert "<td>HTTP 500</td>" in page  # the notice's last error
    assert "failed: no answer: ConnectionError" in page  # the closed port's test
    viewer = Client()
    viewer.force_login(MembershipFactory(account=account, role="viewer").user)
    assert viewer.get("/notifications/").status_code == 403
