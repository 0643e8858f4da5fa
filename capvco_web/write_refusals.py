"""Whether the database takes writes, as the processes that write find it.

A server out of resources (its disk full, out of memory) still answers a `SELECT 1`, so
the `database` readiness check cannot find it out by reading. Every write it refuses so
(a request answered 503, beat's heartbeat not stamped) is stamped here, in the counters'
store (no database query), and so is every heartbeat written. The check fails while the
last refusal is newer than the last heartbeat written and at most two heartbeat intervals
old (beat's tick meets a full disk every interval): within a heartbeat interval of the
space coming back, it passes again. Beat's and the workers' checks, whose stamps are
those heartbeats, say nothing of their own meanwhile: the database is what is wrong."""

from __future__ import annotations

import time

import redis
from django.conf import settings

from capvco_web.counters import counters, stamp

STAMPS = "database_writes"
# What a server out of resources is said to lack (capvco_web.middleware's reasons).
WRITE_REFUSALS = frozenset(
    {"its disk is full", "the server is out of memory", "the server is out of resources"}
)


def write_refused(reason: str) -> None:
    """A write was refused for `reason` (one of middleware's); only a lack of resources
    is stamped: a server that is not there fails `SELECT 1` by itself."""
    if reason in WRITE_REFUSALS:
        stamp(STAMPS, "refused", f"{time.time():.3f} {reason}")


def write_done() -> None:
    stamp(STAMPS, "wrote", f"{time.time():.3f}")


def writes_refused() -> str:
    """Why the database refuses writes now ("" when it does not, as far as known)."""
    try:
        stamps = counters().stamps(STAMPS)
    except (redis.RedisError, OSError):  # the store unreachable: the broker check's to say
        return ""
    refused = stamps.get("refused", "")
    if not refused:
        return ""
    at, _, reason = refused.partition(" ")
    age = time.time() - float(at)
    written_since = float(at) <= float(stamps.get("wrote", "0"))
    if written_since or age > 2 * settings.HEARTBEAT_INTERVAL.total_seconds():
        return ""
    return f"writes refused {age:.0f}s ago: {reason}"
