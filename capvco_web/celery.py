"""The Celery app. Its configuration is the CELERY_* settings; the beat schedule too."""

import gc
import os
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_init

# Connects the worker's setup signal: each worker shares its slots among accounts.
from capvco_web import worker_slots  # noqa: F401

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "capvco_web.settings")

app = Celery("capvco_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
@worker_process_init.connect
def startup_objects_freeze(**kwargs: Any) -> None:
    """What the worker loaded to start (modules, Django's apps and settings, the tasks) is
    kept for its life: moved out of the cyclic collector's reach, so that each collection
    scans only what a task made (and forked processes share those pages unwritten)."""
    gc.collect()
    gc.freeze()
