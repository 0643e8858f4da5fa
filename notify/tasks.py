"""The notification tasks. Beat's tick opens and closes notices in one pass (our own rows
only, no post), then each account with notices due gets a task of its own, which holds one
of the account's share of the worker's slots (capvco_web.worker_slots): an account whose
receivers answer slowly holds no other account's notices back. A test message a person
asks for is a task too, posted under the same share."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.utils import timezone

from capvco_web.locks import object_lock
from capvco_web.tasks import send_again_later, send_on_commit
from capvco_web.worker_slots import account_worker_slot
from notify.models import WebhookTest
from notify.services import (
    TEST_EXPIRES,
    notices_due_accounts,
    notices_reconcile,
    notices_send,
)
from notify.services import webhook_test_post as webhook_test_post_run


@shared_task
def notify_pass() -> None:
    """Sent by beat: open and close notices, then send each account's pass. One at a time:
    a tick that finds the last one still at work leaves it to it."""
    with object_lock("notify-pass") as taken:
        if not taken:
            return
        now = timezone.now()
        notices_reconcile(now=now)
        expires = settings.NOTIFY_INTERVAL.total_seconds()
        for account_id in notices_due_accounts(now=now):
            send_on_commit(notify_send_account, account_id, expires=expires)


@shared_task(bind=True)
def notify_send_account(self: Task[Any, Any], account_id: int) -> None:
    """Post the account's due notices, within NOTIFY_SEND_SECONDS; one pass per account at
    a time (a pass still posting to a slow receiver is not joined by the next tick's)."""
    with account_worker_slot(account_id) as share:
        if not share:
            send_again_later(self)
            return
        with object_lock(f"notify-send:{account_id}") as taken:
            if taken:
                notices_send(now=timezone.now(), account_id=account_id)


@shared_task(bind=True)
def webhook_test_post(self: Task[Any, Any], test_id: int) -> None:
    """Post a test message a person asked for (notify.services.webhook_target_test)."""
    account_id = (
        WebhookTest.objects.filter(pk=test_id, started_at=None)
        .filter(requested_at__gt=timezone.now() - TEST_EXPIRES)
        .values_list("target__account_id", flat=True)
        .first()
    )
    if account_id is None:
        return  # posted, waited too long, or its target was deleted since
    with account_worker_slot(account_id) as share:
        if not share:
            send_again_later(self)
            return
        webhook_test_post_run(test_id=test_id)
