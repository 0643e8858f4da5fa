"""The cache the web processes share (the API's throttle counts), in Redis: the broker's
own unless CACHE_URL names another. A Redis that is restarted or fails over must not turn
every request into a 500, so while it cannot be reached each process counts in its own
memory, and says so once a minute."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

import redis
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
SAY_AGAIN_SECONDS = 60.0


def _or_local(method: F) -> F:
    name = method.__name__

    @wraps(method)
    def call(self: RedisCacheOrLocal, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except UNREACHABLE as exc:
            self._unreachable(exc)
            return getattr(self._local, name)(*args, **kwargs)

    return cast(F, call)


class RedisCacheOrLocal(RedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        kept = {k: v for k, v in params.items() if k in ("TIMEOUT", "KEY_PREFIX", "VERSION")}
        self._local = LocMemCache(f"redis-unreachable-{id(self)}", kept)
        self._said_at = -SAY_AGAIN_SECONDS

    def _unreachable(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._said_at >= SAY_AGAIN_SECONDS:
            self._said_at = now
            # The exception's text names host and port, never a password.
            log.warning("cache: Redis unreachable (%s); counting in this process's memory", exc)

    get = _or_local(RedisCache.get)
    set = _or_local(RedisCache.set)
    add = _or_local(RedisCache.add)
    touch = _or_local(RedisCache.touch)
    delete = _or_local(RedisCache.delete)
    incr = _or_local(RedisCache.incr)
    has_key = _or_local(RedisCache.has_key)
    get_many = _or_local(RedisCache.get_many)
    set_many = _or_local(RedisCache.set_many)
    delete_many = _or_local(RedisCache.delete_many)
    clear = _or_local(RedisCache.clear)
