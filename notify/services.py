"""Webhook targets (changed by account admins, audited) and the notification pass: open a
notice per new alert, close those that ended, post the ones due."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_changes, audit_record, audit_snapshot
from capvco_web.permissions import Actor, perm_name, permission_require
from notify.alerts import LISTED, alerts_collect
from notify.models import Notice, WebhookTarget
from notify.send import Delivery, notice_body, webhook_post

log = logging.getLogger(__name__)

RETRY_BASE = timedelta(seconds=30)
RETRY_MAX = timedelta(hours=1)
# A pass stops posting after this long; a post waits at most its connect and read timeouts.
SEND_SECONDS = 45.0
_CHANGEABLE = {"name", "url", "kind", "secret", "enabled", "reasons", "per_minute"}


def retry_delay(attempts: int) -> timedelta:
    """30 s after the first failed post, doubled after each, never more than an hour."""
    delay: timedelta = RETRY_BASE * 2 ** max(attempts - 1, 0)
    return min(delay, RETRY_MAX)


# --- targets ----------------------------------------------------------------------------


def webhook_target_create(*, target: WebhookTarget, actor: Actor) -> WebhookTarget:
    permission_require(actor, perm_name(WebhookTarget, "add"), target)
    target.full_clean()
    with transaction.atomic():
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


def webhook_target_test(*, target: WebhookTarget, actor: Actor) -> Delivery:
    """Post a test message to the target now (its URL checked again), and audit it."""
    permission_require(actor, perm_name(WebhookTarget, "change"), target)
    now = timezone.now()
    notice = Notice(
        target=target,
        reason="test",
        key="test",
        summary=f"a test message to {target.name}",
        opened_at=now,
    )
    delivery = webhook_post(
        target, notice_body(notice, kind=target.kind), now=now, message_id=notice.webhook_id
    )
    audit_record(
        actor=actor,
        action="webhook_target.test",
        obj=target,
        after={"result": delivery.error or "sent"},
    )
    return delivery


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


def notices_due(*, now: datetime) -> list[Notice]:
    return list(
        Notice.objects.filter(closed_at=None, sent_at=None, given_up_at=None, target__enabled=True)
        .filter(Q(next_try_at=None) | Q(next_try_at__lte=now))
        .select_related("target__account")
        .order_by("opened_at", "pk")
    )


def notices_send(*, now: datetime, seconds: float = SEND_SECONDS) -> int:
    """Post each due notice once, at most `per_minute` a minute to a target; a failed post
    that may succeed later is tried again after `retry_delay`, one that cannot (a 4xx, a
    URL no longer allowed) waits, with its error shown, for a person. Answers how many
    were taken."""
    sent = 0
    budget: dict[int, int] = {}
    stop_at = time.monotonic() + seconds
    for notice in notices_due(now=now):
        if time.monotonic() >= stop_at:
            break  # slow receivers: the rest go in the next pass, within the task's time limit
        target = notice.target
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
        after={
            "target": notice.target.name,
            "reason": notice.reason,
            "key": notice.key,
            "attempt": notice.attempts,
            "result": delivery.error or "sent",
        },
    )


def notify_pass(*, now: datetime | None = None) -> tuple[int, int, int]:
    """One pass: (opened, closed, sent)."""
    now = now or timezone.now()
    opened, closed = notices_reconcile(now=now)
    return opened, closed, notices_send(now=now)
