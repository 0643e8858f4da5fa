"""A worker's slots shared among accounts.

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
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.signals import celeryd_after_setup
from django.conf import settings

from capvco_web.locks import object_lock

logger = logging.getLogger(__name__)


class _Worker:
    """This process's worker, once it is set up: its node name and its slots. The pool's
    processes are forked after the setup and inherit it."""

    node = ""
    slots = 0


@celeryd_after_setup.connect
def worker_slots_note(sender: str, instance: Any, **kwargs: Any) -> None:
    pool = getattr(instance.pool_cls, "__module__", str(instance.pool_cls))
    _Worker.node = sender
    _Worker.slots = 1 if pool.endswith("solo") else int(instance.concurrency)
    share = account_share()
    if share >= _Worker.slots:
        logger.warning(
            "worker %s: %d slot(s), up to %d for one account: an account whose whitesky "
            "answers slowly can hold every slot, and the others wait (WORKER_SLOTS_PER_ACCOUNT, "
            "--concurrency)",
            sender,
            _Worker.slots,
            share,
        )


def account_share() -> int:
    """How many of this worker's slots one account's tasks may hold at once."""
    configured: int = settings.WORKER_SLOTS_PER_ACCOUNT
    return configured if configured > 0 else max(1, _Worker.slots - 1)


@contextmanager
def account_worker_slot(account_id: int) -> Iterator[bool]:
    """One of the account's share of this worker's slots, if one is free; always, outside
    a worker."""
    if not _Worker.slots:
        yield True
        return
    for index in range(account_share()):
        with object_lock(f"worker-slot:{_Worker.node}:{account_id}:{index}") as taken:
            if taken:
                yield True
                return
    yield False
