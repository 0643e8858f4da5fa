"""Who is calling: the login wall for pages, API tokens, throttles, login lockout and the
session's idle timeout (docs/runbook.md: Access).

The browser logs in with a session; the API takes the same session or an API token
(`Authorization: Bearer capvco_...`). There is no HTTP Basic: it would hash a password on
every API call (about 0.35 s of CPU each), and a token replaces it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django_htmx.http import HttpResponseClientRedirect
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions, throttling
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.settings import api_settings

from capvco_web.models import ApiToken
from capvco_web.tokens import TokenRefused, api_token_authenticate

API_PREFIX = "/api/"


def is_api_path(path_info: str) -> bool:
    """Under the API: below /api/, and /api itself (no page lives there: it answers as
    the API does)."""
    return path_info.startswith(API_PREFIX) or path_info == API_PREFIX.rstrip("/")


# Sent by the dashboard's own timed refreshes: they do not keep an idle session alive.
BACKGROUND_POLL_HEADER = "X-Capvco-Poll"
# The session's expiry slides forward on activity at most this often (one write a minute).
SESSION_SLIDE_SECONDS = 60
SESSION_ACTIVITY_KEY = "_capvco_activity"


class LoginRequiredMiddleware(DjangoLoginRequired):
    """Every page needs a logged-in user; the API answers 401 itself instead of redirecting,
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
        if is_api_path(request.path_info):
            return None
        response = super().process_view(request, view_func, view_args, view_kwargs)
        if response is not None and request.headers.get("HX-Request") and "Location" in response:
            return HttpResponseClientRedirect(response["Location"])
        return response


class SessionIdleTimeoutMiddleware:
    """Logs a user out after SESSION_COOKIE_AGE (SESSION_IDLE_TIMEOUT_SECONDS) without
    activity: a request of a logged-in user saves the session, which moves its expiry (in
    the database and the cookie) forward, at most once a minute. The dashboard's timed
    refreshes are not activity, so an unattended browser is logged out too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.user.is_authenticated and not request.headers.get(BACKGROUND_POLL_HEADER):
            now = int(time.time())
            last = request.session.get(SESSION_ACTIVITY_KEY, 0)
            if now - last >= SESSION_SLIDE_SECONDS:
                request.session[SESSION_ACTIVITY_KEY] = now
        return self.get_response(request)


class RateFromSettings(throttling.SimpleRateThrottle):
    """DRF's throttles read their rate once, at import; these read it from settings when
    they check, so a changed setting (or a test's) is followed."""

    def get_rate(self) -> str | None:
        rates: dict[str, Any] = api_settings.DEFAULT_THROTTLE_RATES
        rate: str | None = rates[str(self.scope)]
        return rate


class AnonRateThrottle(RateFromSettings, throttling.AnonRateThrottle):
    """API_RATE_ANON: calls per client address by callers not logged in."""


class UserRateThrottle(RateFromSettings, throttling.UserRateThrottle):
    """API_RATE_USER: calls per user."""


class FailedTokenThrottle(RateFromSettings):
    """API_RATE_FAILED_AUTH: refused tokens per client address. Once over, every token
    from that address is refused with 429 until the oldest failure ages out."""

    scope = "failed_token_auth"

    def get_cache_key(self, request: Request, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def wait_needed(self, request: Request) -> float | None:
        """Seconds until this address may try a token again; None when it may now."""
        count, duration = self.parse_rate(self.rate)
        if count is None or duration is None:
            return None
        self.key = self.get_cache_key(request, None)
        self.now = self.timer()
        self.history = [t for t in self.cache.get(self.key, []) if t > self.now - duration]
        return self.wait() if len(self.history) >= count else None

    def failure_record(self, request: Request) -> None:
        _, duration = self.parse_rate(self.rate)
        if duration is None:
            return
        self.wait_needed(request)
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, duration)


class ApiTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>` (or `Token <token>`): an API token of capvco_web/tokens.py.

    Listed first in REST_FRAMEWORK, so that a call without credentials answers 401 with
    `WWW-Authenticate: Bearer` (with the session first, DRF answers 403).
    """

    keywords = (b"bearer", b"token")

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        words = get_authorization_header(request).split()
        if not words or words[0].lower() not in self.keywords:
            return None  # not ours: the session (or nothing) decides
        if len(words) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: expected 'Bearer <token>'."
            )
        throttle = FailedTokenThrottle()
        wait = throttle.wait_needed(request)
        if wait is not None:
            raise exceptions.Throttled(
                wait,
                detail="Too many refused tokens from your address; try again later.",
            )
        try:
            token = api_token_authenticate(words[1].decode("ascii", errors="replace"))
        except TokenRefused as exc:
            throttle.failure_record(request)
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return (token.user, token)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """How the OpenAPI schema names the token authentication."""

    target_class = ApiTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "capvco_<id>_<secret>"}


def client_address(request: HttpRequest) -> str | None:
    """The caller's address, behind TRUSTED_PROXY_COUNT proxies: the one rule shared by
    the API throttles and the login lockout. None for a request made in-process."""
    address: str | None = throttling.BaseThrottle().get_ident(request)  # type: ignore[arg-type]
    return address or None


def login_lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """What a locked-out login (form or admin) sees: 429, why, when to try again."""
    cool_off = settings.AXES_COOLOFF_TIME
    response = render(
        request,
        "registration/locked_out.html",
        {"minutes": int(cool_off.total_seconds() // 60)},
        status=429,
    )
    response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response
