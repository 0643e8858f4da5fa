"""The one limiter (`slot`: one of `size` slots called `name`), and its two uses: a
worker's slots shared among accounts, and an account's whitesky calls in flight.

A worker's slots shared among accounts.

A task that calls an account's whitesky holds its worker slot (a prefork process) for as
long as whitesky takes to answer. Without a share, one account whose whitesky answers
slowly fills every slot with its observations, sweeps and machine steps, and every other
account waits behind it. So each worker lets at most `WORKER_SLOTS_PER_ACCOUNT` of its
slots run one account's tasks at once (0: all but one, at least one): one slow account
always leaves a slot of every worker of two or more slots to the others. A task that finds
its account's share taken is sent again shortly (`capvco_web.tasks.send_again_later`) and
holds no slot meanwhile.

The share is counted per worker (its node name) with the same non-waiting locks as every
other object; outside a worker (a shell, the tests' in-process runs) there is no share.

An account's calls in flight: at most `WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT` of its machine
steps and bill checks run at once over every worker, so a large scale-up does not flood
whitesky; one that finds them all taken is the next tick's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.signals import worker_init
from django.conf import settings

from capvco_web.locks import object_lock

logger = logging.getLogger(__name__)


class _Worker:
    """This process's worker, once it is set up: its node name and its slots (0: none
    known). The pool's processes are forked after the setup and inherit it."""

    node = ""
    slots = 0


@worker_init.connect
def worker_slots_note(sender: Any, **kwargs: Any) -> None:
    """Sent once the worker's concurrency is settled (an int; or "auto", resolved later)
    and before its pool's processes are made."""
    pool = str(getattr(sender.pool_cls, "__module__", sender.pool_cls))
    _Worker.node = sender.hostname
    if "solo" in pool:
        _Worker.slots = 1
    elif isinstance(sender.concurrency, int):
        _Worker.slots = sender.concurrency
    else:
        logger.warning(
            "worker %s: concurrency %r is not a number of slots; no account's share is "
            "kept (give --concurrency)",
            sender.hostname,
            sender.concurrency,
        )
        return
    share = account_share()
    logger.info(
        "worker %s: %d slot(s), at most %d for one account", _Worker.node, _Worker.slots, share
    )
    if share >= _Worker.slots:
        logger.warning(
            "worker %s: an account whose whitesky answers slowly can hold every slot, and "
            "the others wait (WORKER_SLOTS_PER_ACCOUNT, --concurrency)",
            _Worker.node,
        )


def account_share() -> int:
    """How many of this worker's slots one account's tasks may hold at once."""
    configured: int = settings.WORKER_SLOTS_PER_ACCOUNT
    return configured if configured > 0 else max(1, _Worker.slots - 1)


@contextmanager
def slot(name: str, size: int) -> Iterator[bool]:
    """One of the `size` slots called `name`, if one is free, held until the block ends;
    yields whether one was taken. Never waits. Counted by every process that shares the
    locks (capvco_web.locks): the name says over what (a worker, every worker)."""
    for index in range(size):
        with object_lock(f"{name}:{index}") as taken:
            if taken:
                yield True
                return
    yield False


@contextmanager
def account_worker_slot(account_id: int) -> Iterator[bool]:
    """One of the account's share of this worker's slots, if one is free; always, outside
    a worker."""
    if not _Worker.slots:
        yield True
        return
    with slot(f"worker-slot:{_Worker.node}:{account_id}", account_share()) as taken:
        yield taken


@contextmanager
def account_calls_slot(account_id: int) -> Iterator[bool]:
    """One of the account's call slots over every worker, if one is free."""
    with slot(
        f"account-calls:{account_id}", settings.WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT
    ) as taken:
        yield taken
