from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def dashboard(request: HttpRequest) -> dict[str, object]:
    """What every page's template needs: how often its panels refresh themselves."""
    return {"poll_seconds": settings.DASHBOARD_POLL_SECONDS}
