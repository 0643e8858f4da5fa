"""Webhook targets (changed by account admins, audited) and the notification pass: open a
notice per new alert, close those that ended, post the ones due, each account in a pass of
its own. A test message a person asks for is posted by a worker too, never in the web
request.

What a receiver answered (an HTTP status, no answer, a TLS failure) tells apart the ports
and hosts a URL names: it is kept on the notice and the test, which only those who see
targets (the account's admins) see, and never in the audit log, which every member of the
account reads: there a post is "sent" or "failed"."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_changes, audit_record, audit_snapshot
from capvco_web.backoff import backoff_seconds
from capvco_web.permissions import Actor, perm_name, permission_require
from capvco_web.tasks import send_by_name_on_commit
from cloud.models import Account
from notify.alerts import LISTED, alerts_collect
from notify.models import Notice, WebhookTarget, WebhookTest, targets_bound_check
from notify.send import Delivery, notice_body, webhook_post

log = logging.getLogger(__name__)

RETRY_BASE = timedelta(seconds=30)
RETRY_MAX = timedelta(hours=1)
# A test message not taken by a worker within this long is dropped unposted (a person who
# still wants it asks again); one taken is done within its post's timeouts.
TEST_EXPIRES = timedelta(seconds=60)
TEST_STALE = TEST_EXPIRES + timedelta(seconds=30)
_CHANGEABLE = {"name", "url", "kind", "secret", "enabled", "reasons", "per_minute"}


def retry_delay(attempts: int) -> timedelta:
    """30 s after the first failed post, doubled after each, never more than an hour."""
    seconds = backoff_seconds(
        attempts - 1, base=RETRY_BASE.total_seconds(), cap=RETRY_MAX.total_seconds()
    )
    return timedelta(seconds=seconds)


# --- targets ----------------------------------------------------------------------------


def webhook_target_create(*, target: WebhookTarget, actor: Actor) -> WebhookTarget:
    """Add a target, at most NOTIFY_TARGETS_PER_ACCOUNT to an account: its pass posts to
    each within a bounded time."""
    permission_require(actor, perm_name(WebhookTarget, "add"), target)
    target.full_clean()
    with transaction.atomic():
        # The account's row, locked: two admins adding at once cannot both pass the bound.
        Account.objects.select_for_update().filter(pk=target.account_id).first()
        targets_bound_check(target.account_id)
        target.save()
        audit_record(
            actor=actor, action="webhook_target.create", obj=target, after=audit_snapshot(target)
        )
    return target


def webhook_target_update(
    *, target: WebhookTarget, changes: Mapping[str, Any], actor: Actor
) -> WebhookTarget:
    """Change a target's fields (`secret` replaces it), validated as the model validates;
    audited with before and after, of the secret only that it changed."""
    unknown = set(changes) - _CHANGEABLE
    if unknown:
        raise ValueError(f"not fields of a webhook target that can be changed: {sorted(unknown)}")
    with transaction.atomic():
        stored = WebhookTarget.objects.select_for_update().get(pk=target.pk)
        permission_require(actor, perm_name(WebhookTarget, "change"), stored)
        changed = copy.copy(stored)
        for name, value in changes.items():
            if name == "secret":
                changed.secret_replace(value, now=timezone.now())
            else:
                setattr(changed, name, value)
        before, after = audit_changes(stored, changed)
        if not after:
            return target
        # A stored secret is not judged again (one saved before the rules were is kept).
        changed.full_clean(exclude=None if "secret" in changes else ["secret"])
        changed.save()
        audit_record(
            actor=actor, action="webhook_target.update", obj=changed, before=before, after=after
        )
        # A person changed the target: what it gave up on is tried again.
        Notice.objects.filter(target=changed, given_up_at__isnull=False, closed_at=None).update(
            given_up_at=None, next_try_at=None
        )
    target.refresh_from_db()
    return target


def webhook_target_delete(*, target: WebhookTarget, actor: Actor) -> None:
    permission_require(actor, perm_name(WebhookTarget, "delete"), target)
    with transaction.atomic():
        audit_record(
            actor=actor, action="webhook_target.delete", obj=target, before=audit_snapshot(target)
        )
        target.delete()


class WebhookTestRefused(Exception):
    """A test message not taken now: one to the target is under way, or the account asked
    for its minute's share. Says why, and `retry_after` in seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def webhook_target_test(*, target: WebhookTarget, actor: Actor) -> WebhookTest:
    """Ask a worker to post a test message to the target (its URL checked again there), and
    audit the asking. One test per target at a time, at most NOTIFY_TESTS_PER_ACCOUNT_MINUTE
    an account a minute; more is refused with WebhookTestRefused. Its result comes in the test."""
    permission_require(actor, perm_name(WebhookTarget, "change"), target)
    now = timezone.now()
    with transaction.atomic():
        # The account's row, locked: two requests at once cannot both pass the bounds.
        Account.objects.select_for_update().filter(pk=target.account_id).first()
        pending = WebhookTest.objects.filter(
            target=target, done_at=None, requested_at__gt=now - TEST_STALE
        ).first()
        if pending is not None:
            wait = pending.requested_at + TEST_STALE - now
            raise WebhookTestRefused(
                f"A test message to {target.name} is under way; its result shows when it comes.",
                retry_after=max(1, int(wait.total_seconds())),
            )
        per_minute: int = settings.NOTIFY_TESTS_PER_ACCOUNT_MINUTE
        recent = list(
            WebhookTest.objects.filter(
                target__account_id=target.account_id,
                requested_at__gt=now - timedelta(minutes=1),
            )
            .order_by("-requested_at")
            .values_list("requested_at", flat=True)[:per_minute]
        )
        if len(recent) >= per_minute:
            wait = recent[-1] + timedelta(minutes=1) - now
            seconds = max(1, int(wait.total_seconds()) + 1)
            raise WebhookTestRefused(
                f"{per_minute} test messages of account {target.account} in the last minute, "
                f"the most NOTIFY_TESTS_PER_ACCOUNT_MINUTE allows: try again in {seconds} s.",
                retry_after=seconds,
            )
        test = WebhookTest.objects.create(
            target=target, requested_by=actor if isinstance(actor, User) else None, requested_at=now
        )
        audit_record(
            actor=actor,
            action="webhook_target.test",
            obj=target,
            after={"test": test.pk, "result": "asked"},
        )
        send_by_name_on_commit("notify.tasks.webhook_test_post", test.pk)
    return test


def webhook_test_post(*, test_id: int, now: datetime | None = None) -> WebhookTest | None:
    """Post the test message (what the worker runs): once, however often its task is
    delivered; not when it waited past TEST_EXPIRES. Answers the test, None when there is
    nothing to post."""
    now = now or timezone.now()
    claimed = WebhookTest.objects.filter(
        pk=test_id, started_at=None, requested_at__gt=now - TEST_EXPIRES
    ).update(started_at=now)
    if claimed != 1:
        return None
    test = WebhookTest.objects.select_related("target__account").get(pk=test_id)
    notice = Notice(
        target=test.target,
        reason="test",
        key="test",
        summary=f"a test message to {test.target.name}",
        opened_at=test.requested_at,
    )
    delivery = webhook_post(
        test.target,
        notice_body(notice, kind=test.target.kind),
        now=now,
        message_id=notice.webhook_id,
    )
    test.done_at = timezone.now()
    test.error = delivery.error
    test.save(update_fields=["done_at", "error"])
    if delivery.error:
        log.warning("test %s to target %s: %s", test.pk, test.target_id, delivery.error)
    audit_record(
        actor=SystemActor.NOTIFY,
        action="webhook_target.test_post",
        obj=test.target,
        after={"test": test.pk, "result": "failed" if delivery.error else "sent"},
    )
    return test


# --- the pass ---------------------------------------------------------------------------


def notices_reconcile(*, now: datetime) -> tuple[int, int]:
    """Open a notice for each alert new to an enabled target that takes its reason, and
    close the open ones whose alert ended: absent from our own rows, or from whole listings
    of its location. Answers (opened, closed); a second pass over the same rows writes
    nothing."""
    targets = list(WebhookTarget.objects.filter(enabled=True))
    alerts = alerts_collect(now=now, account_ids={t.account_id for t in targets})
    opened = closed = 0
    for target in targets:
        wanted = {
            (a.reason.value, a.key): a
            for a in alerts.found
            if a.account_id == target.account_id and a.reason in target.reasons
        }
        open_now = {
            (n.reason, n.key): n for n in Notice.objects.filter(target=target, closed_at=None)
        }
        new = [
            Notice(
                target=target,
                reason=a.reason,
                key=a.key,
                summary=a.summary[:500],
                details=a.details,
                opened_at=now,
            )
            for key, a in wanted.items()
            if key not in open_now
        ]
        # A concurrent pass that opened the same notice wins: the partial unique constraint.
        opened += len(Notice.objects.bulk_create(new, ignore_conflicts=True))
        ended = [
            n.pk
            for key, n in open_now.items()
            if key not in wanted
            and (n.reason not in LISTED or n.details.get("location_id") in alerts.complete)
        ]
        if ended:
            closed += Notice.objects.filter(pk__in=ended, closed_at=None).update(closed_at=now)
    return opened, closed


def _due(now: datetime) -> QuerySet[Notice]:
    return Notice.objects.filter(
        closed_at=None, sent_at=None, given_up_at=None, target__enabled=True
    ).filter(Q(next_try_at=None) | Q(next_try_at__lte=now))


def notices_due(*, now: datetime, account_id: int | None = None) -> list[Notice]:
    """The notices to post now (of one account, or all), oldest first but taking each
    target in turn: one target's backlog does not hold its account's others back."""
    due = _due(now).select_related("target__account").order_by("opened_at", "pk")
    if account_id is not None:
        due = due.filter(target__account_id=account_id)
    turns: dict[int, int] = {}
    ranked = []
    for notice in due:
        turn = turns[notice.target_id] = turns.get(notice.target_id, -1) + 1
        ranked.append((turn, notice))
    return [notice for _, notice in sorted(ranked, key=lambda pair: pair[0])]


def notices_due_accounts(*, now: datetime) -> list[int]:
    """The accounts that have notices to post now: each gets a pass of its own."""
    accounts = _due(now).values_list("target__account_id", flat=True).distinct()
    return sorted(accounts)


def notices_send(
    *, now: datetime, account_id: int | None = None, seconds: float | None = None
) -> int:
    """Post each due notice (of one account, or all) once, at most `per_minute` a minute to
    a target; a failed post that may succeed later is tried again after `retry_delay`, one
    that cannot (a 4xx, a URL no longer allowed) waits, with its error shown, for a person.
    A target that failed is not posted to again in this pass: a receiver that does not
    answer costs the pass one post's timeouts, not one per notice. Stops after `seconds`
    (NOTIFY_SEND_SECONDS). Answers how many were taken."""
    sent = 0
    budget: dict[int, int] = {}
    failing: set[int] = set()
    limit = settings.NOTIFY_SEND_SECONDS if seconds is None else seconds
    stop_at = time.monotonic() + limit
    for notice in notices_due(now=now, account_id=account_id):
        if time.monotonic() >= stop_at:
            break  # slow receivers: the rest go in the next pass, within the task's time limit
        target = notice.target
        if target.pk in failing:
            continue  # the next pass tries it again
        if target.pk not in budget:
            recent = Notice.objects.filter(target=target, tried_at__gt=now - timedelta(minutes=1))
            budget[target.pk] = target.per_minute - recent.count()
        if budget[target.pk] <= 0:
            continue  # the next pass, in a minute, has room again
        # Claim the attempt (compare-and-set): two passes never post the same notice at once.
        claimed = Notice.objects.filter(
            pk=notice.pk, attempts=notice.attempts, sent_at=None, closed_at=None
        ).update(attempts=F("attempts") + 1, tried_at=now)
        if claimed != 1:
            continue
        budget[target.pk] -= 1
        notice.attempts += 1
        delivery = webhook_post(
            target, notice_body(notice, kind=target.kind), now=now, message_id=notice.webhook_id
        )
        notice_delivered(notice, delivery, now=now)
        if delivery.error:
            failing.add(target.pk)
        sent += not delivery.error
    return sent


def notice_delivered(notice: Notice, delivery: Delivery, *, now: datetime) -> None:
    """Record how a post went, and audit it."""
    if not delivery.error:
        fields = {"sent_at": now, "next_try_at": None, "last_error": ""}
    elif delivery.retryable:
        fields = {"next_try_at": now + retry_delay(notice.attempts), "last_error": delivery.error}
    else:
        # Given up until a person changes the target: never silently, the error stays.
        fields = {"next_try_at": None, "given_up_at": now, "last_error": delivery.error}
    Notice.objects.filter(pk=notice.pk).update(**fields)
    for name, value in fields.items():
        setattr(notice, name, value)
    if delivery.error:
        log.warning("notice %s to target %s: %s", notice.pk, notice.target_id, delivery.error)
    audit_record(
        actor=SystemActor.NOTIFY,
        action="notice.send",
        obj=notice,
        # What the receiver answered stays on the notice, for the account's admins only.
        after={
            "target": notice.target.name,
            "reason": notice.reason,
            "key": notice.key,
            "attempt": notice.attempts,
            "result": "failed" if delivery.error else "sent",
        },
    )


def notify_pass(*, now: datetime | None = None) -> tuple[int, int, int]:
    """One pass: (opened, closed, sent)."""
    now = now or timezone.now()
    opened, closed = notices_reconcile(now=now)
    return opened, closed, notices_send(now=now)
