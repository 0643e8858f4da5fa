"""Level-triggered sends: a task for an object that is already queued is not queued again.

Beat sends one task per object on each tick (a location to observe). When a tick's work
is not done by the next tick, the next would queue the same object twice; and an expiry of
one interval, which kept the queue from growing so, drops the work that waited its turn
instead (an object observed seldom, or never, under load). So each send marks its object
queued; a tick sends only objects not marked; the task clears the mark when it starts (what
changed after that start is the next send's). The work waits and is done once however many
ticks passed, as a Kubernetes controller's work queue coalesces the keys of one object.

The mark lives in the broker's Redis with a time to live, shorter than the message's
expiry (capvco_web.tasks.QUEUED_INTERVALS): a message lost with its worker or with a
broker restarted empty leaves its object unmarked again within that time, and the next
tick sends it again from the rows. Beside a broker that is
not Redis, or a Redis that cannot be reached, nothing is marked and every tick sends (the
task's lock keeps a duplicate from running at once).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cache

import redis
from django.conf import settings

from capvco_web.environment import redis_client_url

logger = logging.getLogger(__name__)


@cache
def _redis() -> redis.Redis | None:
    url = redis_client_url(settings.CELERY_BROKER_URL)
    if url is None:
        return None
    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


def _key(kind: str, object_id: int) -> str:
    return f"{settings.METRICS_KEY_PREFIX}queued:{kind}:{object_id}"


def queued_mark(kind: str, object_ids: Iterable[int], seconds: float) -> list[int]:
    """Mark each object queued for `seconds` unless it is marked already; the ids that were
    not (to send now), in the order given."""
    ids = list(object_ids)
    client = _redis()
    if client is None or not ids:
        return ids
    ttl = max(1, round(seconds))
    try:
        pipe = client.pipeline(transaction=False)
        for object_id in ids:
            pipe.set(_key(kind, object_id), 1, nx=True, ex=ttl)
        marked = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("queued marks of %s not read (%s): each is sent", kind, exc)
        return ids
    return [object_id for object_id, new in zip(ids, marked, strict=True) if new]


def queued_clear(kind: str, object_id: int) -> None:
    """The object's task started: a later tick may send it again."""
    client = _redis()
    if client is None:
        return
    try:
        client.delete(_key(kind, object_id))
    except redis.RedisError as exc:
        logger.warning("queued mark of %s %s not cleared (%s): it lapses", kind, object_id, exc)
