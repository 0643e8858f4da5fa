"""The money pass: the hour's rollup (once an hour) and the idle GPU nodes; and the leak
ledger's pass, as often as observe, so that a leak ended by a release or a listing is told
ended within one pass. Both read our own mirror only, no whitesky or Kubernetes call, so
one pass serves every account.

The check of whitesky's bill calls whitesky, so it is fanned out per account, each under
the account's lock and one of its call slots (as clusters.tasks does)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from billing.bills import account_bills_check
from billing.idle import idle_record
from billing.leaks import leaks_record
from billing.rollups import rollups_take
from capvco_web.locks import object_lock
from capvco_web.tasks import send_on_commit
from capvco_web.worker_slots import account_calls_slot, account_worker_slot
from cloud.models import Account
from cloud.whitesky import whitesky_client

logger = logging.getLogger(__name__)
T = TypeVar("T")


def _step(name: str, failures: list[str], run: Callable[[], T]) -> T | None:
    """One step of the pass; its failure is reported and the next steps run all the same
    (the rollup does not wait for the ledger, nor idle GPUs for either)."""
    try:
        return run()
    except Exception as exc:  # any fault of one step: reported, not raised
        logger.exception("billing pass: %s failed", name)
        failures.append(f"{name}: {exc!r}")
        return None


@shared_task
def billing_pass() -> dict[str, Any] | None:
    """The rollup, the leak ledger and the idle GPU nodes, each on its own: a step or a
    ledger row that fails is logged and named in the result (`failures`), and stops
    nothing else. None: another worker's pass is on it."""
    failures: list[str] = []
    with object_lock("billing-pass") as taken:
        if not taken:
            return None
        now = timezone.now()
        taken_rollups = _step("rollups", failures, lambda: rollups_take(now=now))
        idle = _step("idle GPUs", failures, lambda: idle_record(now=now))
    result: dict[str, Any] = {
        "hour": taken_rollups.hour.isoformat() if taken_rollups and taken_rollups.hour else None,
        "days": [day.date().isoformat() for day in taken_rollups.days] if taken_rollups else [],
        "cost_rows": taken_rollups.cost_rows if taken_rollups else 0,
        "capacity_rows": taken_rollups.capacity_rows if taken_rollups else 0,
        "idle": {"opened": idle.opened, "ended": idle.ended} if idle else None,
        "failures": failures,
    }
    if result["hour"] or result["days"] or (idle and (idle.opened or idle.ended)):
        logger.info("billing pass: %s", result)
    if failures:
        logger.warning("billing pass: %d failure(s): %s", len(failures), "; ".join(failures))
    return result


@shared_task
def leak_ledger_pass() -> dict[str, Any] | None:
    """Open and end the ledger's rows. A row that cannot be written or decided is logged
    and named in the result (`failures`), and stops no other row, of any account. None:
    another worker's pass is on it."""
    with object_lock("leak-ledger") as taken:
        if not taken:
            return None
        leaks = leaks_record()
    if leaks.opened or leaks.ended:
        logger.info("leak ledger: opened %d, ended %d", leaks.opened, leaks.ended)
    if leaks.failures:
        logger.warning(
            "leak ledger: %d failure(s): %s", len(leaks.failures), "; ".join(leaks.failures)
        )
    return {"opened": leaks.opened, "ended": leaks.ended, "failures": leaks.failures}


@shared_task
def bill_check_all() -> None:
    """Sent by beat: one bill check per account."""
    for account_id in Account.objects.values_list("pk", flat=True):
        send_on_commit(bill_check_account, account_id)


@shared_task
def bill_check_account(account_id: int) -> None:
    """Check the account's finished hours not checked yet (billing.bills). What cannot be
    decided now (a partial observation, a failed call, retryable or not) is left for the
    next pass; the next tick is the retry."""
    account = Account.objects.filter(pk=account_id).first()
    if account is None:
        return  # deleted since the fan-out
    # A share of this worker's slots (a slow whitesky holds no other account back), the
    # check itself once, one of the account's call slots, and every call within the pass's
    # time; what is not reached is the next tick's.
    with (
        account_worker_slot(account_id) as share,
        object_lock(f"bill-check:{account_id}") as taken,
    ):
        if not (share and taken):
            return
        with account_calls_slot(account_id) as slot:
            if not slot:
                return  # the account's calls are all in flight: the next tick
            seconds = settings.WHITESKY_OBSERVE_PASS_SECONDS
            with whitesky_client(account, seconds=seconds) as client:
                results = account_bills_check(client=client, account=account, now=timezone.now())
    for result in results:
        if result.error is not None:
            logger.warning(
                "bill check %s %s: %s (%s)",
                result.location,
                result.start.isoformat(),
                result.error,
                "retryable" if result.error.retryable else "not retryable; asked again next pass",
            )
        elif result.written and result.unexplained:
            logger.warning(
                "bill check %s %s: %s billed, not explained (%d objects)",
                result.location,
                result.start.isoformat(),
                result.unexplained,
                sum(verdict == "unexplained" for verdict, _ in result.items),
            )
