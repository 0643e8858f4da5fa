"""Counters that every process, web and workers, adds to and a scrape reads: a Redis hash
in the broker's Redis (for `make run`, the private Redis of its checkout), else, beside a
broker that is not Redis, a file under the var dir (one machine). Nothing here touches
the database, so counting costs no query. Beside the counts, stamps: the last value
written under a key (when each account's whitesky last answered: cloud.reach)."""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import redis
from django.conf import settings

from capvco_web.environment import redis_client_url

logger = logging.getLogger(__name__)
SEP = "\x1f"  # joins label values into one field of the store


class CounterStore(Protocol):
    def add(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None: ...
    def read(self, name: str) -> dict[tuple[str, ...], int]: ...
    def stamp(self, name: str, key: str, value: str) -> None: ...
    def stamps(self, name: str) -> dict[str, str]: ...


class RedisCounters:
    def __init__(self, url: str, prefix: str) -> None:
        self.redis = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        self.prefix = prefix

    def add(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        self.redis.hincrby(f"{self.prefix}metrics:{name}", SEP.join(labels), amount)

    def read(self, name: str) -> dict[tuple[str, ...], int]:
        raw: Mapping[bytes, bytes] = self.redis.hgetall(f"{self.prefix}metrics:{name}")  # type: ignore[assignment]
        return {tuple(k.decode().split(SEP)): int(v) for k, v in raw.items()}

    def stamp(self, name: str, key: str, value: str) -> None:
        self.redis.hset(f"{self.prefix}stamps:{name}", key, value)

    def stamps(self, name: str) -> dict[str, str]:
        raw: Mapping[bytes, bytes] = self.redis.hgetall(f"{self.prefix}stamps:{name}")  # type: ignore[assignment]
        return {k.decode(): v.decode() for k, v in raw.items()}


class FileCounters:
    """One JSON file per counter, changed under an exclusive lock."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, name: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder / f"{name}.json"

    def _change(self, file: str, key: str, change: Callable[[Any], Any]) -> None:
        with self._path(file).open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            values = json.loads(handle.read() or "{}")
            values[key] = change(values.get(key))
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(values))

    def _read(self, file: str) -> dict[str, Any]:
        path = self._path(file)
        if not path.exists():
            return {}
        with path.open() as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            values: dict[str, Any] = json.loads(handle.read() or "{}")
        return values

    def add(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        self._change(name, SEP.join(labels), lambda count: (count or 0) + amount)

    def read(self, name: str) -> dict[tuple[str, ...], int]:
        return {tuple(k.split(SEP)): v for k, v in self._read(name).items()}

    def stamp(self, name: str, key: str, value: str) -> None:
        self._change(f"{name}.stamps", key, lambda _: value)

    def stamps(self, name: str) -> dict[str, str]:
        return self._read(f"{name}.stamps")


@cache
def counters() -> CounterStore:
    url = redis_client_url(settings.CELERY_BROKER_URL)
    if url is not None:
        return RedisCounters(url, settings.METRICS_KEY_PREFIX)
    return FileCounters(Path(settings.VAR_DIR) / "metrics")


def count(name: str, *labels: str) -> None:
    """Count one event. Never fails the work it counts: a lost count is only logged."""
    try:
        counters().add(name, labels)
    except (redis.RedisError, OSError) as exc:
        logger.warning("metrics: %s not counted: %s", name, exc)


def stamp(name: str, key: str, value: str) -> None:
    """Write the last value of `key`. Never fails the work it records: a lost one is
    only logged."""
    try:
        counters().stamp(name, key, value)
    except (redis.RedisError, OSError) as exc:
        logger.warning("metrics: %s %s not stamped: %s", name, key, exc)


def whitesky_call_count(account: int, operation: str, status: str) -> None:
    count("whitesky_calls", str(account), operation, status)


def reconcile_step_count(action: str, outcome: str) -> None:
    count("reconcile_steps", action, outcome)


# Attach latency, as a Prometheus histogram kept in counters: one count per bucket (upper
# bounds in seconds, cumulative as Prometheus wants them), the count and the sum (in ms).
SRIOV_ATTACH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def sriov_attach_observe(seconds: float) -> None:
    """One NIC attach took `seconds` (from its turn on the VM to the NIC found)."""
    for bound in SRIOV_ATTACH_BUCKETS:
        if seconds <= bound:
            count("sriov_attach_seconds_bucket", str(bound))
    count("sriov_attach_seconds_bucket", "+Inf")
    try:
        counters().add("sriov_attach_seconds_sum_ms", (), round(seconds * 1000))
    except (redis.RedisError, OSError) as exc:
        logger.warning("metrics: sriov attach time not counted: %s", exc)
