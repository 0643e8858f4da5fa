from __future__ import annotations

from celery import shared_task

from capvco_web.locks import object_lock
from notify.services import notify_pass as notify_pass_run


@shared_task
def notify_pass() -> None:
    """Sent by beat: open and close notices, post the due ones. One pass at a time: a
    pass still posting to a slow receiver is not joined by the next tick."""
    with object_lock("notify-pass") as taken:
        if taken:
            notify_pass_run()
