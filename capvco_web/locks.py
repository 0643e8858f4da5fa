"""Per-object locks that write nothing: a converged pass must not touch the database.

PostgreSQL: a session-level advisory lock. SQLite (the embedded default, one machine):
an flock on a file under var/locks/.
"""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection


def _key64(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextmanager
def object_lock(name: str) -> Iterator[bool]:
    """Try to take the lock `name` without waiting; yields whether it was taken."""
    if connection.vendor == "postgresql":
        key = _key64(name)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            taken = bool(cursor.fetchone()[0])
        try:
            yield taken
        finally:
            if taken:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    folder = Path(settings.VAR_DIR) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{hashlib.sha256(name.encode()).hexdigest()[:32]}.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
