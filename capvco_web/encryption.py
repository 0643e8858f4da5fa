"""Secrets at rest: a model field that stores its value encrypted with Fernet.

The key list comes from FIELD_ENCRYPTION_KEY (newest first); older keys still decrypt,
so a key can be rotated by prepending a new one and re-saving rows.
"""

from __future__ import annotations

from functools import cache
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

# What an audit record or a page says of a secret: never its value.
SECRET_KEPT = "(secret)"  # noqa: S105


@cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def encrypt(plaintext: str) -> str:
    return _fernet(tuple(settings.FIELD_ENCRYPTION_KEYS)).encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet(tuple(settings.FIELD_ENCRYPTION_KEYS)).decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ImproperlyConfigured(
            "a stored secret cannot be decrypted with FIELD_ENCRYPTION_KEY "
            "(was the key replaced instead of rotated?)"
        ) from exc


class EncryptedTextField(models.TextField[str, str]):
    """Holds plaintext in Python, ciphertext in the database. Never shown in forms."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        # Not editable unless said: a migration records only the editable one.
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("editable", None)
        if self.editable:
            kwargs["editable"] = True
        return name, path, args, kwargs

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        return decrypt(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(str(value))

    def shown(self, value: str) -> str:
        """What may be shown of a (non-empty) value, in an audit record or on a page."""
        return SECRET_KEPT


def url_shown(url: str) -> str:
    """The scheme and host (and port) of `url`, `/…` for whatever follows: where it goes,
    without the path or query that may be the credential (a Slack incoming webhook's)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - refuses a port that is not a number
    except ValueError:
        return SECRET_KEPT
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return SECRET_KEPT  # nothing of it is known to be harmless to show
    rest = "/…" if parts.path not in ("", "/") or parts.query or parts.fragment else "/"
    return f"{parts.scheme}://{parts.netloc}{rest}"


class EncryptedUrlField(EncryptedTextField):
    """A URL that is a credential: encrypted at rest, shown as its scheme and host only."""

    def shown(self, value: str) -> str:
        return url_shown(value)
