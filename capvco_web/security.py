"""Response headers every answer carries: the Content-Security-Policy, and `no-store` for
the API (its answers are per user and may hold a token shown once)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

from capvco_web.auth import is_api_path


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        if is_api_path(request.path_info):
            response["Cache-Control"] = "no-store"
        return response
