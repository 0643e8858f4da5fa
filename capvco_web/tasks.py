import threading
from datetime import datetime, timedelta
from typing import Any

from celery import Task, shared_task
from celery.contrib.django.task import DjangoTask
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from capvco_web.backoff import backoff_seconds
from capvco_web.integrations.whitesky import WhiteskyError
from capvco_web.models import Heartbeat
from capvco_web.retention import history_prune as retention_prune

BEAT = "beat"


@shared_task
def heartbeat() -> None:
    """Sent by beat, run by a worker: its time proves beat, broker and worker all work."""
    Heartbeat.objects.update_or_create(name=BEAT, defaults={"ticked_at": timezone.now()})


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
    `expires`, it is dropped when it waited that many seconds.

    Celery's Django fixup makes every task a `DjangoTask`; `shared_task` is typed as the
    plain `Task`, so this is where the type is narrowed to reach `apply_async_on_commit`."""
    assert isinstance(task, DjangoTask), f"{task.name} is not a DjangoTask"
    if expires is None:
        task.delay_on_commit(*args)
    else:
        task.apply_async_on_commit(args, expires=expires)


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
        app.tasks[name].delay(*args)  # unknown: KeyError, loudly

    transaction.on_commit(send)


@shared_task
def history_prune() -> None:
    """Sent by beat once a day: history past its retention goes (capvco_web.retention)."""
    retention_prune()
