"""Secrets at rest: a model field that stores its value encrypted with Fernet.

The key list comes from FIELD_ENCRYPTION_KEY (newest first); older keys still decrypt,
so a key can be rotated by prepending a new one and re-saving rows.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models


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

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        return decrypt(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(str(value))
