import logging
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from celery import Task, shared_task
from celery.signals import after_task_publish
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

from capvco_web.backoff import backoff_seconds
from capvco_web.integrations.whitesky import WhiteskyError
from capvco_web.middleware import unavailable_reason
from capvco_web.models import Heartbeat
from capvco_web.queued import queued_clear, queued_mark
from capvco_web.retention import history_prune as retention_prune
from capvco_web.write_refusals import write_done, write_refused

# Beat's tick (the heartbeat task), stamped twice in Heartbeat: by beat once its message
# is in the broker (beat and the broker work), and by the worker that ran it (a worker
# took it in time). /readyz tells the two apart (capvco_web.health).
BEAT = "beat"
WORKERS = "workers"
log = logging.getLogger(__name__)


@shared_task
def heartbeat() -> None:
    """Sent by beat, run by a worker: its time proves that a worker takes work in time."""
    tick_stamp(WORKERS)


def tick_stamp(name: str) -> None:
    Heartbeat.objects.update_or_create(name=name, defaults={"ticked_at": timezone.now()})
    write_done()


@after_task_publish.connect
def heartbeat_sent(sender: str | None = None, **kwargs: Any) -> None:
    """Beat's own stamp, once its tick is in the broker (in beat's process: only beat sends
    the heartbeat). The database unreachable costs the stamp, never the tick."""
    if sender != heartbeat.name:
        return
    try:
        tick_stamp(BEAT)
    except DatabaseError as exc:
        log.warning("beat's tick not stamped: %s: %s", type(exc).__name__, exc)
        write_refused(unavailable_reason(exc))
        connection.close()  # the next tick connects again


def retry_if_transient(
    task: Task[Any, Any], exc: WhiteskyError, *, base_delay: float = 5.0
) -> None:
    """Retry the task with exponential backoff when trying again can help, and before the
    task expires (a later tick sends it again)."""
    countdown = backoff_seconds(task.request.retries, base=base_delay)
    if (
        exc.retryable
        and task.request.retries < (task.max_retries or 0)
        and not expires_within(task, countdown)
    ):
        raise task.retry(exc=exc, countdown=countdown)


def expires_within(task: Task[Any, Any], seconds: float) -> bool:
    """Whether the running task's message expires within `seconds`: sent again, it would be
    dropped unrun."""
    expires = task.request.expires
    if not expires:
        return False
    moment = datetime.fromisoformat(str(expires))
    return moment <= timezone.now() + timedelta(seconds=seconds)


def send_on_commit(task: Task[Any, Any], *args: Any, expires: float | None = None) -> None:
    """Send a task once the current transaction commits (at once outside of one); with
    `expires`, it is dropped when it waited that many seconds. A broker that cannot be
    reached loses the message, not the work: see `_send`."""
    options: dict[str, Any] = {} if expires is None else {"expires": expires}
    transaction.on_commit(lambda: _send(task, args, options))


# An object sent by beat's tick stays marked queued (capvco_web.queued) this many
# intervals at most, and its message expires after twice as long: under load the work
# that waited its turn is done, not dropped (a mark that lapsed first lets one more be
# queued, which the object's lock makes cheap); a lost message's object is sent again
# within the mark's time; a queue that no worker took for long is not worked off stale.
QUEUED_INTERVALS = 4


def send_each_unless_queued(
    task: Task[Any, Any], object_ids: Iterable[int], *, interval: timedelta
) -> None:
    """Beat's tick: send `task` for each object not already queued, marked queued until
    the task starts (it calls `queued_clear`), at most QUEUED_INTERVALS intervals."""
    marked = QUEUED_INTERVALS * interval.total_seconds()
    expires = 2 * marked

    def send(object_id: int) -> None:
        if not _send(task, (object_id,), {"expires": expires}):
            queued_clear(task.name, object_id)  # not queued after all: the next tick's

    for object_id in queued_mark(task.name, object_ids, marked):
        transaction.on_commit(partial(send, object_id))


def _send(task: Task[Any, Any], args: tuple[Any, ...], options: dict[str, Any]) -> bool:
    """Send now. Every task sent from a request or a pass is also found again from the rows
    it works on by a beat pass (the release sweep, the reconcile tick, the NIC queue's,
    the observers'), so with the broker down the request that was committed stands and
    answers; the message is what is lost, and the next pass after the broker is back
    does the work. Answers whether it was sent."""
    try:
        task.apply_async(args, **options)
    except OperationalError as exc:
        log.warning(
            "broker unreachable (%s): %s not sent; the next beat pass finds its work again",
            exc,
            task.name,
        )
        return False
    return True


def send_again_later(task: Task[Any, Any]) -> None:
    """Send the running task again as it was sent (its expiry too) in a moment, to run when
    its account has a slot of a worker free (capvco_web.worker_slots). Not a retry: what
    the task may try again after whitesky's failures is not used up."""
    request = task.request
    if expires_within(task, settings.ACCOUNT_BUSY_AGAIN_SECONDS):
        return  # a later tick sends it again
    # The expiry as it came: an ISO time that apply_async passes on unchanged.
    expiry: dict[str, Any] = {"expires": request.expires} if request.expires else {}
    task.apply_async(
        tuple(request.args or ()),
        dict(request.kwargs or {}),
        countdown=settings.ACCOUNT_BUSY_AGAIN_SECONDS,
        **expiry,
    )


_TASK_IMPORT = threading.Lock()


def send_by_name_on_commit(name: str, *args: Any) -> None:
    """Send the task registered as `name` once the current transaction commits. Services
    start tasks so, by name: a tasks module imports the services it calls, never the
    other way round."""

    def send() -> None:
        # Our app, not Celery's `current_app`: in a web server's request thread that is a
        # bare fallback app, with no tasks and no broker of ours.
        from capvco_web.celery import app

        if name not in app.tasks:
            # One thread at a time: request threads importing the task modules at once
            # can each find another's half-imported module, its tasks not registered yet.
            with _TASK_IMPORT:
                app.loader.import_default_modules()  # as a worker does at start
        _send(app.tasks[name], args, {})  # unknown: KeyError, loudly

    transaction.on_commit(send)


@shared_task
def history_prune() -> None:
    """Sent by beat once a day: history past its retention goes (capvco_web.retention)."""
    retention_prune()
