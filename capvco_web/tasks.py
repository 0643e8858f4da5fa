from typing import Any

from celery import Task, current_app, shared_task
from celery.contrib.django.task import DjangoTask
from django.db import transaction
from django.utils import timezone

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
    """Retry the task with exponential backoff when trying again can help."""
    if exc.retryable and task.request.retries < (task.max_retries or 0):
        raise task.retry(exc=exc, countdown=base_delay * 2**task.request.retries)


def send_on_commit(task: Task[Any, Any], *args: Any) -> None:
    """Send a task once the current transaction commits (at once outside of one).

    Celery's Django fixup makes every task a `DjangoTask`; `shared_task` is typed as the
    plain `Task`, so this is where the type is narrowed to reach `delay_on_commit`."""
    assert isinstance(task, DjangoTask), f"{task.name} is not a DjangoTask"
    task.delay_on_commit(*args)


def send_by_name_on_commit(name: str, *args: Any) -> None:
    """Send the task registered as `name` once the current transaction commits. Services
    start tasks so, by name: a tasks module imports the services it calls, never the
    other way round."""

    def send() -> None:
        if name not in current_app.tasks:
            current_app.loader.import_default_modules()  # as a worker does at start
        current_app.tasks[name].delay(*args)  # unknown: KeyError, loudly

    transaction.on_commit(send)


@shared_task
def history_prune() -> None:
    """Sent by beat once a day: history past its retention goes (capvco_web.retention)."""
    retention_prune()
