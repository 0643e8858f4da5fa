"""The whitesky credential: a JWT that expires and is refreshed at the IAM host.

The token is read from its `exp` claim without verifying the signature (we are not the
audience that trusts it; we only want to know when to ask for a new one). It never appears in
a repr, a log line or an error message.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import threading
import time
from collections.abc import Callable

from .errors import Unauthorized

logger = logging.getLogger(__name__)

REFRESH_PATH = "/v1/oauth/jwt/refresh"

# What a JWT looks like: three base64url parts (header, claims, signature), and no longer
# than a credential the control plane stores. Anything else is not taken for one.
JWT_PATTERN = r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"
MAX_JWT_LENGTH = 8192
_JWT = re.compile(JWT_PATTERN)


def jwt_expiry(token: str) -> float | None:
    """The `exp` claim (unix seconds) of a JWT, or None when it has none or is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return float(exp)
    return None


def token_from_refresh_body(body: str) -> str:
    """The new JWT from the IAM's answer: plain text, a quoted string, or JSON with a
    `jwt`, `token` or `access_token` field."""
    text = body.strip()
    candidate: object = text
    if text.startswith(("{", '"')):
        try:
            candidate = json.loads(text)
        except ValueError:
            candidate = text
    if isinstance(candidate, dict):
        candidate = next(
            (
                candidate[key]
                for key in ("jwt", "token", "access_token")
                if isinstance(candidate.get(key), str)
            ),
            None,
        )
    if (
        not isinstance(candidate, str)
        or len(candidate) > MAX_JWT_LENGTH
        or not _JWT.fullmatch(candidate)
    ):
        raise Unauthorized("the token refresh answered no JWT", operation="refreshJWT")
    return candidate


class JwtCredential:
    """Holds the current JWT and knows when it needs refreshing.

    `on_refreshed` is called with each new token so the caller can persist it (the app stores
    it encrypted). A failing callback is logged and does not fail the call in progress: the
    new token is valid in memory either way.
    """

    def __init__(
        self,
        token: str,
        *,
        on_refreshed: Callable[[str], None] | None = None,
        refresh_margin: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = token
        self._expires_at = jwt_expiry(token)
        self._on_refreshed = on_refreshed
        self._refresh_margin = refresh_margin
        self._clock = clock
        self.lock = threading.RLock()
        """Held by whoever refreshes, so that concurrent calls refresh once."""

    def __repr__(self) -> str:
        return f"JwtCredential(expires_at={self._expires_at!r})"

    @property
    def token(self) -> str:
        return self._token

    def needs_refresh(self) -> bool:
        if self._expires_at is None:
            return False
        return self._expires_at - self._clock() < self._refresh_margin

    def expired(self) -> bool:
        return self._expires_at is not None and self._expires_at <= self._clock()

    def replace(self, token: str) -> None:
        self._token = token
        self._expires_at = jwt_expiry(token)
        if self._on_refreshed is None:
            return
        try:
            self._on_refreshed(token)
        except Exception as exc:
            # Only the type: a storage error's message may quote the value it failed to store.
            logger.error(
                "whitesky: on_token_refreshed failed (%s); the new token is kept in memory only",
                type(exc).__name__,
            )

    def redact(self, text: str) -> str:
        """`text` with the current token blanked out, for anything that gets logged."""
        return text.replace(self._token, "<jwt>") if self._token else text
