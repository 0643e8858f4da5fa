"""The Celery app. Its configuration is the CELERY_* settings; the beat schedule too."""

import os

from celery import Celery

# Connects the worker's setup signal: each worker shares its slots among accounts.
from capvco_web import worker_slots  # noqa: F401

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "capvco_web.settings")

app = Celery("capvco_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
