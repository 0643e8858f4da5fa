from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from capvco_web.permissions import allowed_somewhere


def dashboard(request: HttpRequest) -> dict[str, object]:
    """What every page's template needs: how often its panels refresh themselves, and
    whether the user sees webhook targets anywhere (the notifications page, notify's)."""
    return {
        "poll_seconds": settings.DASHBOARD_POLL_SECONDS,
        "sees_notifications": SimpleLazyObject(
            lambda: allowed_somewhere(request.user, "notify.view_webhooktarget")
        ),
    }
