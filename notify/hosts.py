"""Where a webhook may be sent: NOTIFY_WEBHOOK_HOSTS, read as whitesky's allow-list is."""

from __future__ import annotations

from django.conf import settings

from capvco_web.integrations.whitesky.hosts import AllowedHosts


def webhook_url_refusal(url: str) -> str | None:
    """Why a webhook may not be sent to `url`, or None when it may. Read at each call: the
    setting is the truth at send time too, not when the target was saved."""
    hosts = AllowedHosts(settings.NOTIFY_WEBHOOK_HOSTS, source="NOTIFY_WEBHOOK_HOSTS")
    return hosts.refusal(url)
