"""Posting a notice: its body (generic JSON or Slack's), its signature, and the one HTTP
call, which says whether trying again can help."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import requests
from django.conf import settings

from notify.hosts import webhook_url_refusal
from notify.models import Notice, WebhookTarget

TIMEOUT = (5.0, 10.0)  # connect, read


@dataclass(frozen=True)
class Delivery:
    """How one post went: `error` empty when it was taken; `retryable` whether the same post
    may succeed later (a 5xx, a 429, no answer)."""

    error: str = ""
    retryable: bool = False


def notice_body(notice: Notice, *, kind: str) -> dict[str, Any]:
    """The message of `notice`, as a target of `kind` takes it."""
    if kind == WebhookTarget.Kind.SLACK:
        return {"text": f"capvco: {notice.get_reason_display()}: {notice.summary}"}
    return {
        "id": notice.pk,
        "reason": notice.reason,
        "key": notice.key,
        "summary": notice.summary,
        "details": notice.details,
        "opened_at": notice.opened_at.isoformat(),
        "account": notice.target.account.name,
    }


def signature(secret: str, timestamp: str, body: str) -> str:
    """`sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`: what a receiver computes to
    know the post came from us and is not an old one replayed."""
    mac = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def webhook_post(target: WebhookTarget, payload: dict[str, Any], *, now: datetime) -> Delivery:
    """Post `payload` to the target, signed; the one place notifications leave the process.
    The URL is checked against NOTIFY_WEBHOOK_HOSTS again here: the setting may have
    changed since the target was saved."""
    if refused := webhook_url_refusal(target.url):
        return Delivery(error=f"refused: {refused}")
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    timestamp = str(int(now.timestamp()))
    headers = {"Content-Type": "application/json", "X-Capvco-Timestamp": timestamp}
    if target.secret:
        headers["X-Capvco-Signature"] = signature(target.secret, timestamp, body)
    try:
        with requests.Session() as session:
            session.trust_env = False  # no proxy, netrc or CA bundle of the environment
            answer = session.post(
                target.url,
                data=body.encode(),
                headers=headers,
                timeout=TIMEOUT,
                allow_redirects=False,  # a redirect would send the body off the allow-list
                verify=settings.NOTIFY_CA_BUNDLE or True,
            )
    except requests.RequestException as exc:
        return Delivery(error=f"no answer: {type(exc).__name__}", retryable=True)
    if 200 <= answer.status_code < 300:
        return Delivery()
    retryable = answer.status_code >= 500 or answer.status_code == 429
    return Delivery(error=f"HTTP {answer.status_code}", retryable=retryable)
