"""Webhook notifications: a real HTTP receiver in a thread takes the posts and checks
their signatures; the leaks, machines and locations are real rows."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from standardwebhooks import Webhook

from billing.idle import idle_record
from billing.models import BillCheck, BillItem, IdleSpell
from capvco_web.models import AuditEvent
from clusters.models import Machine
from gpus.models import VgpuReservation
from notify import tasks
from notify.models import Notice, Reason, WebhookTarget
from notify.services import (
    notices_reconcile,
    notices_send,
    notify_pass,
    webhook_target_create,
    webhook_target_update,
)
from tests.billing.test_costs import world_make
from tests.factories import (
    AccountFactory,
    KubePodFactory,
    LocationFactory,
    MachineFactory,
    MembershipFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
    kube_observed_as,
)

pytestmark = pytest.mark.django_db

SECRET = "whsec_Y2FwdmNvIHRlc3Qgc2VjcmV0LCAzMiBieXRlcyBvaw=="
NEXT_SECRET = "whsec_dGhlIG5leHQgc2VjcmV0OiAzMiBieXRlcywgYWxzbw=="


@dataclass
class Receiver:
    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)
    # Status codes to answer, first to last; 200 once they are used up.
    answers: list[int] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(post["body"]) for post in self.posts]


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    found = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            found.posts.append({"headers": dict(self.headers), "body": body})
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
    server.shutdown()
    server.server_close()


def _verified(post: dict[str, Any]) -> dict[str, Any]:
    """The body of a post that a Standard Webhooks library verifies with the secret."""
    return Webhook(SECRET).verify(post["body"], post["headers"])  # type: ignore[no-any-return]


def _target(receiver: Receiver, account: Any, **fields: Any) -> WebhookTarget:
    # The factories' locations were never observed completely: stale, which is told on its own.
    fields.setdefault("reasons", [r for r in Reason.values if r != Reason.LOCATION_STALE])
    target = WebhookTarget(account=account, name="ops", url=receiver.url, secret=SECRET, **fields)
    target.full_clean()
    target.save()
    return target


def test_each_leak_is_told_once_signed_over_several_passes(receiver: Receiver) -> None:
    location = LocationFactory()
    vgpu = VgpuReservationFactory(orphaned=True, location=location)
    vm = VirtualMachineFactory(
        location=location, orphaned_since=timezone.now(), orphan_reason="no machine owns it"
    )
    _target(receiver, location.account, reasons=[Reason.VGPU_ORPHAN, Reason.VM_ORPHAN])

    for _ in range(3):
        notify_pass()

    bodies = sorted((_verified(p) for p in receiver.posts), key=lambda b: b["reason"])
    assert [(b["reason"], b["key"]) for b in bodies] == [
        ("vgpu_orphan", f"{location.pk}:{vgpu.vgpu_id}"),
        ("vm_orphan", f"{location.pk}:{vm.vm_id}"),
    ]
    assert bodies[0]["details"]["vgpu_id"] == vgpu.vgpu_id
    assert AuditEvent.objects.filter(action="notice.send", actor_name="notify").count() == 2


def test_a_second_pass_over_the_same_rows_writes_nothing(receiver: Receiver) -> None:
    location = LocationFactory(last_complete_observation_at=timezone.now())
    VgpuReservationFactory(orphaned=True, location=location)
    MachineFactory(
        phase=Machine.Phase.FAILED,
        pool__site__cluster__account=location.account,
        pool__site__location=location,
    )
    _target(receiver, location.account, reasons=Reason.values)
    notify_pass()
    with CaptureQueriesContext(connection) as queries:
        assert notify_pass() == (0, 0, 0)
    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert writes == []
    assert len(receiver.posts) == 2


def test_beat_runs_the_pass_as_its_task(
    receiver: Receiver, settings: Any, run_tasks: Callable[[], AbstractContextManager[None]]
) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["notify"]
    assert entry["task"] == "notify.tasks.notify_pass"
    assert entry["schedule"] == settings.NOTIFY_INTERVAL
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    _target(receiver, machine.pool.cluster.account)
    with run_tasks():  # the tick, then the account's own pass it sends
        tasks.notify_pass.apply()
    assert [b["reason"] for b in receiver.bodies()] == ["machine_failed"]


def test_a_leak_past_its_grace_is_told_again_as_such(receiver: Receiver) -> None:
    location = LocationFactory(account=AccountFactory(orphan_grace_period=timedelta(hours=1)))
    now = timezone.now()
    VgpuReservationFactory(orphaned=True, location=location, orphaned_since=now)
    _target(receiver, location.account)

    notify_pass(now=now)
    notify_pass(now=now + timedelta(minutes=61))

    assert [b["reason"] for b in receiver.bodies()] == ["vgpu_orphan", "vgpu_orphan_past_grace"]


def test_a_failed_post_is_tried_again_after_the_backoff(receiver: Receiver) -> None:
    receiver.answers = [500]
    machine = MachineFactory(phase=Machine.Phase.FAILED, failure_message="quota exceeded")
    _target(receiver, machine.pool.cluster.account)
    now = timezone.now()

    notify_pass(now=now)
    notice = Notice.objects.get()
    assert (notice.sent_at, notice.attempts, notice.last_error) == (None, 1, "HTTP 500")
    assert notice.next_try_at == now + timedelta(seconds=30)

    notify_pass(now=now + timedelta(seconds=20))  # not due yet
    assert len(receiver.posts) == 1
    notify_pass(now=now + timedelta(seconds=31))

    notice.refresh_from_db()
    assert len(receiver.posts) == 2
    assert notice.sent_at == now + timedelta(seconds=31)
    assert (notice.attempts, notice.last_error) == (2, "")
    assert "quota exceeded" in _verified(receiver.posts[1])["summary"]


def test_a_refused_post_is_given_up_with_its_error_until_the_target_changes(
    receiver: Receiver,
) -> None:
    receiver.answers = [404]
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    target = _target(receiver, machine.pool.cluster.account)
    now = timezone.now()

    notify_pass(now=now)
    notify_pass(now=now + timedelta(hours=2))
    notice = Notice.objects.get()
    assert len(receiver.posts) == 1
    assert (notice.last_error, notice.given_up_at) == ("HTTP 404", now)

    webhook_target_update(target=target, changes={"name": "ops-2"}, actor=_admin(target))
    notify_pass(now=now + timedelta(hours=3))
    assert len(receiver.posts) == 2
    assert Notice.objects.get().sent_at is not None


def test_a_notice_closes_when_the_leak_is_released_from_a_complete_listing(
    receiver: Receiver,
) -> None:
    location = LocationFactory()
    vgpu = VgpuReservationFactory(orphaned=True, location=location)
    _target(receiver, location.account)
    notify_pass()

    # The leak is gone, but the last observation was partial: that proves nothing.
    VgpuReservation.objects.filter(pk=vgpu.pk).update(state=VgpuReservation.State.RELEASED)
    location.observation_complete = False
    location.save()
    notify_pass()
    assert Notice.objects.get(reason=Reason.VGPU_ORPHAN).closed_at is None

    location.observation_complete = True
    location.last_complete_observation_at = timezone.now()
    location.save()
    notify_pass()
    assert Notice.objects.get(reason=Reason.VGPU_ORPHAN).closed_at is not None
    assert len(receiver.posts) == 1  # opened once, told once; closing sends nothing


def test_a_failed_machine_running_again_closes_and_a_new_failure_is_told(
    receiver: Receiver,
) -> None:
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    _target(receiver, machine.pool.cluster.account, reasons=[Reason.MACHINE_FAILED])
    notify_pass()
    Machine.objects.filter(pk=machine.pk).update(phase=Machine.Phase.RUNNING)
    notify_pass()
    assert Notice.objects.get().closed_at is not None
    Machine.objects.filter(pk=machine.pk).update(phase=Machine.Phase.FAILED)
    notify_pass()
    assert len(receiver.posts) == 2
    assert Notice.objects.filter(closed_at=None).count() == 1


def test_a_stale_location_is_told_and_closes_when_fresh(receiver: Receiver) -> None:
    now = timezone.now()
    location = LocationFactory(last_complete_observation_at=now - timedelta(hours=1))
    _target(receiver, location.account, reasons=[Reason.LOCATION_STALE])
    notify_pass(now=now)
    assert [b["key"] for b in receiver.bodies()] == [str(location.pk)]
    location.last_complete_observation_at = now
    location.save()
    notify_pass(now=now)
    assert Notice.objects.get().closed_at is not None


def _bill_checked(location: Any, start: datetime, unexplained: list[tuple[str, str]]) -> None:
    """A check of whitesky's bill for the hour from `start`: our machines' 1.00, and each
    unexplained (kind, id) at 0.25."""
    check = BillCheck.objects.create(
        location=location, start=start, end=start + timedelta(hours=1),
        checked_at=start + timedelta(hours=1, minutes=5), currency="EUR",
        billed=Decimal("1.00") + Decimal("0.25") * len(unexplained), owned=Decimal("1.00"),
        unexplained=Decimal("0.25") * len(unexplained),
    )  # fmt: skip
    for kind, external_id in unexplained:
        BillItem.objects.create(
            bill=check, kind=kind, external_id=external_id, name=f"shadow-{external_id}",
            verdict=BillItem.Verdict.UNEXPLAINED, units={"vcu": 1.0}, cost=Decimal("0.25"),
        )  # fmt: skip


def test_an_unexplained_bill_is_told_once_per_location_until_a_later_check_has_none(
    receiver: Receiver,
) -> None:
    location = LocationFactory(name="nl-rmd-dc01-001")
    _target(receiver, location.account, reasons=[Reason.UNEXPLAINED_BILL])
    hour = datetime(2026, 12, 3, 7, tzinfo=UTC)
    _bill_checked(location, hour, [("vm", "4711"), ("vgpu", "vgpu-000042")])

    notify_pass()
    _bill_checked(location, hour + timedelta(hours=1), [("vm", "4711")])  # still there
    with CaptureQueriesContext(connection) as queries:
        assert notify_pass() == (0, 0, 0)

    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert writes == []
    (body,) = [_verified(post) for post in receiver.posts]
    assert (body["reason"], body["key"]) == ("unexplained_bill", str(location.pk))
    assert body["summary"] == (
        "location nl-rmd-dc01-001, 2026-12-03 07:00\u201308:00 UTC: 0.5000 EUR billed, not "
        "explained: vGPU shadow-vgpu-000042 (vgpu-000042) 0.2500, VM shadow-4711 (4711) 0.2500"
    )
    assert [(o["kind"], o["id"], o["cost"]) for o in body["details"]["objects"]] == [
        ("vgpu", "vgpu-000042", "0.250000"),
        ("vm", "4711", "0.250000"),
    ]

    _bill_checked(location, hour + timedelta(hours=2), [])
    notify_pass()
    assert Notice.objects.get().closed_at is not None
    _bill_checked(location, hour + timedelta(hours=3), [("vm", "4712")])
    notify_pass()
    assert len(receiver.posts) == 2
    assert "4712" in _verified(receiver.posts[1])["summary"]


def test_a_target_gets_at_most_its_per_minute_and_the_rest_later(receiver: Receiver) -> None:
    first = MachineFactory(phase=Machine.Phase.FAILED)
    for _ in range(4):
        MachineFactory(phase=Machine.Phase.FAILED, pool=first.pool)
    _target(receiver, first.pool.cluster.account, per_minute=2)
    now = timezone.now()

    notify_pass(now=now)
    assert len(receiver.posts) == 2
    notify_pass(now=now + timedelta(seconds=30))
    assert len(receiver.posts) == 2
    notify_pass(now=now + timedelta(seconds=61))
    notify_pass(now=now + timedelta(seconds=122))
    assert len(receiver.posts) == 5
    assert len({b["key"] for b in receiver.bodies()}) == 5


def test_a_pass_stops_posting_when_its_time_is_up(receiver: Receiver) -> None:
    first = MachineFactory(phase=Machine.Phase.FAILED)
    MachineFactory(phase=Machine.Phase.FAILED, pool=first.pool)
    _target(receiver, first.pool.cluster.account)
    now = timezone.now()
    notices_reconcile(now=now)
    assert notices_send(now=now, seconds=0) == 0
    assert notices_send(now=now) == 2


def test_a_slack_target_gets_a_text_body(receiver: Receiver) -> None:
    machine = MachineFactory(phase=Machine.Phase.FAILED, failure_message="no capacity")
    _target(receiver, machine.pool.cluster.account, kind=WebhookTarget.Kind.SLACK)
    notify_pass()
    body = _verified(receiver.posts[0])
    assert list(body) == ["text"]
    assert "failed machine" in body["text"] and "no capacity" in body["text"]


def test_a_url_outside_the_allow_list_is_refused_naming_its_host(receiver: Receiver) -> None:
    target = WebhookTarget(account=AccountFactory(), name="x", url="https://hooks.evil.example/a")
    with pytest.raises(ValidationError) as refused:
        target.full_clean()
    assert "hooks.evil.example is not in NOTIFY_WEBHOOK_HOSTS" in str(refused.value)


def test_a_url_no_longer_allowed_is_not_posted_to(receiver: Receiver, settings: Any) -> None:
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    _target(receiver, machine.pool.cluster.account)
    settings.NOTIFY_WEBHOOK_HOSTS = ["hooks.example"]
    notify_pass()
    assert receiver.posts == []
    notice = Notice.objects.get()
    assert notice.last_error.startswith("refused: ") and "NOTIFY_WEBHOOK_HOSTS" in notice.last_error
    assert notice.given_up_at is not None


def _admin(target: WebhookTarget) -> Any:
    return MembershipFactory(account=target.account, role="admin", user__is_staff=True).user


def test_the_secret_is_never_shown(
    receiver: Receiver, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.answers = [500]
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    account = machine.pool.cluster.account
    admin = MembershipFactory(account=account, role="admin", user__is_staff=True).user
    target = webhook_target_create(
        target=WebhookTarget(account=account, name="ops", url=receiver.url, secret=SECRET),
        actor=admin,
    )
    webhook_target_update(target=target, changes={"secret": NEXT_SECRET}, actor=admin)
    notify_pass()
    client.force_login(admin)
    pages = [
        client.get("/admin/notify/webhooktarget/"),
        client.get(f"/admin/notify/webhooktarget/{target.pk}/change/"),
        client.get("/admin/notify/notice/"),
        client.get("/admin/capvco_web/auditevent/"),
        client.get("/audit/"),
    ]
    assert [page.status_code for page in pages] == [200] * 5
    shown = [page.content.decode() for page in pages]
    shown += [json.dumps([e.before, e.after]) for e in AuditEvent.objects.all()]
    shown.append(caplog.text)
    assert "HTTP 500" in caplog.text  # the failure is logged, without the secret
    assert not [text for text in shown if SECRET in text or NEXT_SECRET in text]


def test_only_account_admins_see_and_change_targets(
    receiver: Receiver, client: Client, run_tasks: Callable[[], AbstractContextManager[None]]
) -> None:
    target = _target(receiver, AccountFactory())
    operator = MembershipFactory(account=target.account, role="operator", user__is_staff=True).user
    client.force_login(operator)
    assert client.get(f"/admin/notify/webhooktarget/{target.pk}/change/").status_code in (302, 403)
    stranger = MembershipFactory(role="admin", user__is_staff=True).user  # of another account
    client.force_login(stranger)
    assert client.get(f"/admin/notify/webhooktarget/{target.pk}/change/").status_code == 302
    assert target.url not in client.get("/admin/notify/webhooktarget/").content.decode()
    client.force_login(_admin(target))
    form = {
        "account": target.account_id, "name": "ops", "url": "https://elsewhere.example/x",
        "kind": "json", "enabled": "on", "reasons": ["machine_failed"], "per_minute": 30,
    }  # fmt: skip
    answer = client.post(f"/admin/notify/webhooktarget/{target.pk}/change/", form)
    assert "elsewhere.example is not in NOTIFY_WEBHOOK_HOSTS" in answer.content.decode()
    with run_tasks():
        answer = client.post(
            "/admin/notify/webhooktarget/",
            {"action": "send_test", "_selected_action": [target.pk]},
            follow=True,
        )
    assert "Test messages on their way to ops" in answer.content.decode()
    assert receiver.bodies()[0]["reason"] == "test"
    assert AuditEvent.objects.filter(action="webhook_target.test").count() == 1


def test_gpus_idle_past_the_threshold_are_told_once_and_closed_when_a_pod_asks(
    receiver: Receiver, settings: Any
) -> None:
    settings.NOTIFY_IDLE_GPU_AFTER = timedelta(hours=6)
    world = world_make()
    kube_observed_as(world.cluster, complete=True)
    _target(receiver, world.account, reasons=[Reason.IDLE_GPUS])
    start = timezone.now() - timedelta(hours=5)
    idle_record(now=start)  # node-0 and node-4 have an idle GPU each

    notify_pass()  # 5 hours: not yet
    told_early = len(receiver.posts)
    # node-4's GPU found work; node-0's stays idle past 6 hours.
    KubePodFactory(cluster=world.cluster, node_name="node-4", namespace="a", gpu_requests=1)
    idle_record(now=timezone.now())
    IdleSpell.objects.filter(ended_at__isnull=True).update(since=start - timedelta(hours=2))
    notify_pass()
    notify_pass()

    assert told_early == 0
    bodies = [_verified(p) for p in receiver.posts]
    assert [(b["reason"], b["details"]["node"], b["details"]["idle_gpus"]) for b in bodies] == [
        ("idle_gpus", "node-0", 1)
    ]
    # 1 idle vGPU at 730 EUR a month: 1 EUR an hour, for 7 hours.
    assert (bodies[0]["details"]["hourly_cost"], bodies[0]["details"]["currency"]) == (
        "1.0000", "EUR",
    )  # fmt: skip
    KubePodFactory(cluster=world.cluster, node_name="node-0", namespace="b", gpu_requests=1)
    idle_record(now=timezone.now())
    notify_pass()
    assert Notice.objects.get(reason=Reason.IDLE_GPUS).closed_at is not None


def test_an_admin_sends_a_test_from_the_notifications_page_and_others_cannot(
    receiver: Receiver, run_tasks: Callable[[], AbstractContextManager[None]]
) -> None:
    target = _target(receiver, AccountFactory(name="acme"), reasons=[Reason.VGPU_ORPHAN])
    client = Client()
    admin = MembershipFactory(account=target.account, role="admin").user
    client.force_login(admin)

    page = client.get("/notifications/")
    nav = client.get("/").content.decode()
    with run_tasks():
        answer = client.post(f"/notifications/{target.pk}/test/", headers={"HX-Request": "true"})

    assert page.status_code == 200 and "Send a test" in page.content.decode()
    assert 'href="/notifications/"' in nav
    assert SECRET not in page.content.decode()
    assert answer.status_code == 200 and "waiting for a worker" in answer.content.decode()
    body = _verified(receiver.posts[0])
    assert (body["reason"], len(receiver.posts)) == ("test", 1)
    assert AuditEvent.objects.filter(action="webhook_target.test", actor_name=admin.username)
    # A viewer of the account sees no page and no link; an admin of another account
    # does not find the target.
    viewer = MembershipFactory(account=target.account, role="viewer").user
    client.force_login(viewer)
    assert client.get("/notifications/").status_code == 403
    assert 'href="/notifications/"' not in client.get("/").content.decode()
    assert client.post(f"/notifications/{target.pk}/test/").status_code == 404
    client.force_login(MembershipFactory(role="admin").user)
    assert client.post(f"/notifications/{target.pk}/test/").status_code == 404
    assert len(receiver.posts) == 1


def test_a_failed_test_says_why_without_javascript(
    receiver: Receiver, run_tasks: Callable[[], AbstractContextManager[None]]
) -> None:
    target = _target(receiver, AccountFactory(), reasons=[Reason.VGPU_ORPHAN])
    receiver.answers = [500]
    client = Client()
    client.force_login(MembershipFactory(account=target.account, role="admin").user)

    with run_tasks():
        client.post(f"/notifications/{target.pk}/test/")
    answer = client.get("/notifications/")

    assert f'id="test-result-{target.pk}" class="error"' in answer.content.decode()
    assert "failed: HTTP 500" in answer.content.decode()
