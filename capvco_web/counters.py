"""Counters that every process, web and workers, adds to and a scrape reads: a Redis hash
when the broker is Redis, else a file under the var dir (the embedded default, one
machine). Nothing here touches the database, so counting costs no query."""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

import redis
from django.conf import settings

logger = logging.getLogger(__name__)
SEP = "\x1f"  # joins label values into one field of the store


class CounterStore(Protocol):
    def add(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None: ...
    def read(self, name: str) -> dict[tuple[str, ...], int]: ...


class RedisCounters:
    def __init__(self, url: str, prefix: str) -> None:
        self.redis = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        self.prefix = prefix

    def add(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        self.redis.hincrby(f"{self.prefix}metrics:{name}", SEP.join(labels), amount)

    def read(self, name: str) -> dict[tuple[str, ...], int]:
        raw: Mapping[bytes, bytes] = self.redis.hgetall(f"{self.prefix}metrics:{name}")  # type: ignore[assignment]
        return {tuple(k.decode().split(SEP)): int(v) for k, v in raw.items()}


class FileCounters:
    """One JSON file per counter, changed under an exclusive lock."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, name: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder / f"{name}.json"

    def add(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        with self._path(name).open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            counts = json.loads(handle.read() or "{}")
            key = SEP.join(labels)
            counts[key] = counts.get(key, 0) + amount
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(counts))

    def read(self, name: str) -> dict[tuple[str, ...], int]:
        path = self._path(name)
        if not path.exists():
            return {}
        with path.open() as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            counts: dict[str, int] = json.loads(handle.read() or "{}")
        return {tuple(k.split(SEP)): v for k, v in counts.items()}


@cache
def counters() -> CounterStore:
    url = settings.CELERY_BROKER_URL
    if urlparse(url).scheme in ("redis", "rediss"):
        return RedisCounters(url, settings.METRICS_KEY_PREFIX)
    return FileCounters(Path(settings.VAR_DIR) / "metrics")


def count(name: str, *labels: str) -> None:
    """Count one event. Never fails the work it counts: a lost count is only logged."""
    try:
        counters().add(name, labels)
    except (redis.RedisError, OSError) as exc:
        logger.warning("metrics: %s not counted: %s", name, exc)


def whitesky_call_count(operation: str, status: str) -> None:
    count("whitesky_calls", operation, status)


def reconcile_step_count(action: str, outcome: str) -> None:
    count("reconcile_steps", action, outcome)
