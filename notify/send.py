"""Posting a notice: its body (generic JSON or Slack's), its signature (Standard Webhooks:
https://www.standardwebhooks.com), and the one HTTP call, which says whether trying again
can help."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import requests
from django.conf import settings

from notify.hosts import webhook_url_refusal
from notify.models import Notice, WebhookTarget, secret_key

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
        return {"text": slack_escaped(f"capvco: {notice.get_reason_display()}: {notice.summary}")}
    return {
        "id": notice.pk,
        "reason": notice.reason,
        "key": notice.key,
        "summary": notice.summary,
        "details": notice.details,
        "opened_at": notice.opened_at.isoformat(),
        "account": notice.target.account.name,
    }


def slack_escaped(text: str) -> str:
    """`text` as Slack shows it as written: it reads `<...>` as a mention (`<!channel>`) or a
    link, and `&amp;`, `&lt;`, `&gt;` back as `&`, `<`, `>` (its message formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def signature(secret: str, message_id: str, timestamp: str, body: str) -> str:
    """`v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`, the key the bytes of the
    `whsec_` secret: what a Standard Webhooks library computes to know the post came from
    us, and is not an old one replayed."""
    signed = f"{message_id}.{timestamp}.{body}".encode()
    mac = hmac.new(secret_key(secret), signed, hashlib.sha256)
    return f"v1,{base64.b64encode(mac.digest()).decode()}"


def legacy_signature(secret: str, timestamp: str, body: str) -> str:
    """`sha256=<hex HMAC-SHA256(key, "<timestamp>.<body>")>`: X-Capvco-Signature, kept while
    receivers move to the Standard Webhooks headers (docs/guides/notifications.md)."""
    mac = hmac.new(secret_key(secret), f"{timestamp}.{body}".encode(), hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def signed_headers(
    target: WebhookTarget, *, message_id: str, body: str, now: datetime
) -> dict[str, str]:
    """The Standard Webhooks headers of a post of `body`: its id, its time and, when the
    target has a secret, one signature per secret it signs with (two while one rotates)."""
    timestamp = str(int(now.timestamp()))
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": timestamp,
        "X-Capvco-Timestamp": timestamp,
    }
    if secrets := target.signing_secrets(now=now):
        headers["webhook-signature"] = " ".join(
            signature(secret, message_id, timestamp, body) for secret in secrets
        )
        headers["X-Capvco-Signature"] = legacy_signature(secrets[0], timestamp, body)
    return headers


def webhook_post(
    target: WebhookTarget, payload: dict[str, Any], *, now: datetime, message_id: str
) -> Delivery:
    """Post `payload` to the target, signed, as message `message_id` (the same each time
    one message is posted again); the one place notifications leave the process.
    The URL is checked against NOTIFY_WEBHOOK_HOSTS again here: the setting may have
    changed since the target was saved."""
    if refused := webhook_url_refusal(target.url):
        return Delivery(error=f"refused: {refused}")
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    headers = {
        "Content-Type": "application/json",
        **signed_headers(target, message_id=message_id, body=body, now=now),
    }
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
