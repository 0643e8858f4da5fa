from celery import shared_task
from django.utils import timezone

from capvco_web.models import Heartbeat

BEAT = "beat"


@shared_task
def heartbeat() -> None:
    """Sent by beat, run by a worker: its time proves beat, broker and worker all work."""
    Heartbeat.objects.update_or_create(name=BEAT, defaults={"ticked_at": timezone.now()})
