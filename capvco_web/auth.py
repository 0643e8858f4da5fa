"""Every page needs a logged-in user; the API answers 401/403 itself instead of redirecting."""

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.http import HttpRequest, HttpResponseBase
from django_htmx.http import HttpResponseClientRedirect

API_PREFIX = "/api/"


class LoginRequiredMiddleware(DjangoLoginRequired):
    """Every page needs a logged-in user; the API answers for itself instead of redirecting,
    and an htmx request is sent to the login page as a whole page, not swapped into a panel.
    """

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponseBase],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        # DRF enforces IsAuthenticated by default (see REST_FRAMEWORK in settings).
        if request.path_info.startswith(API_PREFIX):
            return None
        response = super().process_view(request, view_func, view_args, view_kwargs)
        if response is not None and request.headers.get("HX-Request") and "Location" in response:
            return HttpResponseClientRedirect(response["Location"])
        return response
