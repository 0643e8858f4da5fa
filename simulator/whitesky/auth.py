"""HS256 JWTs, as the whitesky IAM issues them (``exp``, ``iat``, ``sub``).

The secret is made per process: a restarted simulator does not accept old tokens, so a
client must be able to get a fresh one (GET /_sim/token stands in for the portal).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

from simulator.whitesky.errors import Unauthorized


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_jwt(secret: bytes, *, subject: str, now: float, ttl: int) -> str:
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"sub": subject, "iat": int(now), "exp": int(now) + ttl, "iss": "whitesky-simulator"}
    signing_input = ".".join(
        _b64encode(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{_b64encode(signature)}"


def verify_jwt(secret: bytes, token: str, *, now: float) -> dict[str, Any]:
    """The token's claims; ``Unauthorized`` saying why when it is not acceptable."""
    parts = token.split(".")
    if len(parts) != 3:
        raise Unauthorized("Invalid JWT: malformed token")
    try:
        header = json.loads(_b64decode(parts[0]))
        claims = json.loads(_b64decode(parts[1]))
        signature = _b64decode(parts[2])
    except (binascii.Error, ValueError) as exc:
        raise Unauthorized("Invalid JWT: malformed token") from exc
    if not isinstance(header, dict) or header.get("alg") != "HS256" or not isinstance(claims, dict):
        raise Unauthorized("Invalid JWT: unsupported algorithm or claims")
    expected = hmac.new(secret, f"{parts[0]}.{parts[1]}".encode("ascii"), hashlib.sha256).digest()
    if not hmac.compare_digest(signature, expected):
        raise Unauthorized("Invalid JWT: bad signature")
    expires = claims.get("exp")
    if not isinstance(expires, int) or now >= expires:
        raise Unauthorized("JWT expired")
    if not isinstance(claims.get("sub"), str):
        raise Unauthorized("Invalid JWT: no subject")
    return claims


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized("Missing Authorization header")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <JWT>'")
    return token.strip()
