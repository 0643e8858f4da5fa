"""API tokens: made (the secret shown once), checked on each API call, revoked.

A token reads `capvco_<key_id>_<secret>`. The row keeps `key_id`, which finds it, and a
SHA-256 of the whole token, compared in constant time: the secret has 256 random bits,
so a fast hash is enough, and a stolen database yields no usable token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.models import API_TOKEN_PREFIX, ApiToken

KEY_ID_BYTES = 6  # 12 hex digits
SECRET_BYTES = 32
# last_used_at is written at most this often, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_TOKENS_PER_USER = 100
# Compared against when no row has the key id, so that both cases take the same time.
_NO_HASH = "0" * 64


class TokenRefused(Exception):
    """Why a presented token does not authenticate; the message is for the caller."""


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _audit_fields(token: ApiToken) -> dict[str, str | None]:
    return {
        "user": token.user.get_username(),
        "name": token.name,
        "prefix": token.prefix,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }


def api_token_check(*, token: ApiToken) -> None:
    """Raise ValidationError, by field, when `token` (not saved yet) may not be made."""
    errors: dict[str, str | ValidationError] = {}
    if not token.name.strip():
        errors["name"] = "Give the token a name that says what it is for."
    if token.expires_at is not None and token.expires_at <= timezone.now():
        errors["expires_at"] = "The expiry must be in the future."
    if ApiToken.objects.filter(user=token.user).count() >= MAX_TOKENS_PER_USER:
        # Not the request's fault: the same one succeeds once a token is revoked (409).
        errors["user"] = ValidationError(
            f"{token.user.get_username()} has {MAX_TOKENS_PER_USER} tokens already: "
            "revoke one first.",
            code="conflict",
        )
    if errors:
        raise ValidationError(errors)


def api_token_create(
    *,
    user: User,
    name: str,
    actor: User | AnonymousUser | SystemActor,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Make a token for `user`; returns the row and the token, which is never seen again.

    Raises ValidationError naming the field at fault. Audited.
    """
    token = ApiToken(user=user, name=name.strip(), expires_at=expires_at)
    with transaction.atomic():
        # The user's row, locked until the token is saved: creates for one user at once
        # count and save one after the other, so that none passes the cap.
        User.objects.select_for_update().filter(pk=user.pk).first()
        api_token_check(token=token)
        token.key_id = secrets.token_hex(KEY_ID_BYTES)
        raw = f"{API_TOKEN_PREFIX}{token.key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
        token.token_hash = token_hash(raw)
        token.full_clean()
        token.save()
        audit_record(actor=actor, action="api_token.create", obj=token, after=_audit_fields(token))
    return token, raw


def api_token_revoke(*, token: ApiToken, actor: User | AnonymousUser | SystemActor) -> None:
    """Revoke a token: from now on it answers 401. Audited (the row itself goes)."""
    with transaction.atomic():
        audit_record(actor=actor, action="api_token.revoke", obj=token, before=_audit_fields(token))
        token.delete()


def api_token_authenticate(raw: str) -> ApiToken:
    """The live token `raw` is, its user loaded; raises TokenRefused saying why not."""
    prefix, _, rest = raw.partition(API_TOKEN_PREFIX)
    key_id, _, secret = rest.partition("_")
    if prefix or not key_id or not secret:
        raise TokenRefused(f"Not an API token: they look like {API_TOKEN_PREFIX}<id>_<secret>.")
    token = ApiToken.objects.select_related("user").filter(key_id=key_id).first()
    matches = hmac.compare_digest(token.token_hash if token else _NO_HASH, token_hash(raw))
    if token is None or not matches:
        raise TokenRefused("Invalid token (revoked, or never made).")
    now = timezone.now()
    if token.expires_at is not None and token.expires_at <= now:
        raise TokenRefused("Token expired: make a new one.")
    if not token.user.is_active:
        raise TokenRefused("User inactive or deleted.")
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
