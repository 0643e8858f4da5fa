"""capvco-web: the control plane for GPUs and SR-IOV NICs on whitesky.cloud."""

from capvco_web.celery import app as celery_app

__all__ = ["celery_app"]
