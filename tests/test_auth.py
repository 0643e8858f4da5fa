"""The login wall, the login lockout, the session's idle timeout and the headers every
answer carries (API tokens: tests/test_tokens.py)."""

from __future__ import annotations

import time
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings as django_settings
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from capvco_web.auth import SESSION_ACTIVITY_KEY

pytestmark = pytest.mark.django_db

WRONG = {"username": "operator", "password": "wrong"}
RIGHT = {"username": "operator", "password": "s3cret-pass"}


@pytest.mark.parametrize("path", ["/", "/admin/"])
def test_pages_redirect_an_anonymous_visitor_to_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/") or response["Location"].startswith(
        "/admin/login/"
    )


def test_an_htmx_refresh_of_a_logged_out_browser_goes_to_the_login_page_whole(
    client: Client,
) -> None:
    response = client.get("/", HTTP_HX_REQUEST="true")
    # Not a 302 whose login page htmx would swap into the status panel.
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith("/login/")


@pytest.mark.parametrize("path", ["/api/v1/", "/api/v1/schema/", "/api/v1/clusters/"])
def test_api_answers_an_anonymous_caller_401_saying_how_to_authenticate(
    client: Client, path: str
) -> None:
    response = client.get(path, HTTP_ACCEPT="application/json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert response.json() == {
        "detail": "Authentication credentials were not provided.",
        "code": "not_authenticated",
    }


def test_api_takes_no_http_basic_authentication(client: Client, user: Any) -> None:
    # HTTP Basic hashed a password on every call; tokens replace it.
    response = client.get(
        "/api/v1/clusters/", HTTP_AUTHORIZATION="Basic b3BlcmF0b3I6czNjcmV0LXBhc3M="
    )
    assert response.status_code == 401


def test_login_page_is_open_and_logging_in_reaches_the_dashboard(client: Client, user) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", RIGHT, follow=True)
    assert response.redirect_chain[-1][0] == "/"
    assert b"Dashboard" in response.content


def test_login_with_a_wrong_password_is_refused(client: Client, user) -> None:  # type: ignore[no-untyped-def]
    response = client.post("/login/", WRONG)
    assert response.status_code == 200
    assert b"didn't match" in response.content
    assert client.get("/").status_code == 302


def test_logged_in_user_sees_the_api_and_its_openapi_schema(logged_in_client: Client) -> None:
    assert logged_in_client.get("/api/v1/").status_code == 200
    schema = logged_in_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    assert schema.json()["openapi"].startswith("3.")
    assert schema.json()["components"]["securitySchemes"]["tokenAuth"]["scheme"] == "bearer"


def test_dashboard_status_fragment_is_served_to_htmx_alone(logged_in_client: Client) -> None:
    full = logged_in_client.get("/")
    fragment = logged_in_client.get("/", HTTP_HX_REQUEST="true")
    assert b"<html" in full.content and b'id="system-status"' in full.content
    assert b"<html" not in fragment.content and b'id="system-status"' in fragment.content
    assert "HX-Request" in fragment["Vary"]


def test_csrf_is_enforced_on_login(user) -> None:  # type: ignore[no-untyped-def]
    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/login/", RIGHT)
    assert response.status_code == 403


# --- login lockout --------------------------------------------------------------------


def fail_logins(client: Client, url: str = "/login/", times: int | None = None) -> None:
    for _ in range(times or django_settings.AXES_FAILURE_LIMIT):
        client.post(url, WRONG)


def assert_locked_out(response: Any) -> None:
    assert response.status_code == 429
    assert response["Retry-After"] == str(15 * 60)
    assert b"Too many failed logins" in response.content
    assert b"ask an admin to unlock it" in response.content


def test_login_is_locked_after_too_many_wrong_passwords_even_with_the_right_one(
    client: Client, user: Any
) -> None:
    fail_logins(client)
    response = client.post("/login/", RIGHT)
    assert_locked_out(response)
    assert client.get("/").status_code == 302  # not logged in


def test_the_admin_login_is_locked_out_too(client: Client, admin_user: Any) -> None:
    for _ in range(django_settings.AXES_FAILURE_LIMIT):
        client.post("/admin/login/", {"username": "admin", "password": "wrong"})
    response = client.post("/admin/login/", {"username": "admin", "password": "password"})
    assert_locked_out(response)


def test_a_lockout_keeps_no_password(client: Client, user: Any) -> None:
    fail_logins(client)
    attempt = AccessAttempt.objects.get(username="operator")
    assert "wrong" not in attempt.post_data


def test_a_lockout_is_per_user_name_so_others_still_log_in(
    client: Client, user: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user(username="other", password="other-pass-1")
    fail_logins(client)
    response = client.post("/login/", {"username": "other", "password": "other-pass-1"})
    assert response.status_code == 302


def test_a_successful_login_forgets_earlier_failures(client: Client, user: Any) -> None:
    fail_logins(client, times=django_settings.AXES_FAILURE_LIMIT - 1)
    assert client.post("/login/", RIGHT).status_code == 302
    client.post("/logout/")
    fail_logins(client, times=django_settings.AXES_FAILURE_LIMIT - 1)
    assert client.post("/login/", RIGHT).status_code == 302


def test_an_admin_unlocks_a_user_with_axes_reset_username(client: Client, user: Any) -> None:
    fail_logins(client)
    assert client.post("/login/", RIGHT).status_code == 429
    call_command("axes_reset_username", "operator")
    assert client.post("/login/", RIGHT).status_code == 302


def test_an_admin_unlocks_a_user_in_the_admin(
    client: Client, user: Any, admin_client: Client
) -> None:
    fail_logins(client)
    attempt = AccessAttempt.objects.get(username="operator")
    delete = reverse("admin:axes_accessattempt_delete", args=[attempt.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert client.post("/login/", RIGHT).status_code == 302


# --- session idle timeout ---------------------------------------------------------------


def session_of(client: Client) -> Session:
    return Session.objects.get(
        session_key=client.cookies[django_settings.SESSION_COOKIE_NAME].value
    )


def idle_for(client: Client, seconds: int) -> Session:
    """Make the client's session look as if its last activity was `seconds` ago."""
    store = client.session
    store[SESSION_ACTIVITY_KEY] = int(time.time()) - seconds
    store.save()
    row = session_of(client)
    row.expire_date = timezone.now() + timedelta(
        seconds=django_settings.SESSION_COOKIE_AGE - seconds
    )
    row.save()
    return row


def test_the_idle_timeout_is_eight_hours_by_default() -> None:
    assert django_settings.SESSION_COOKIE_AGE == 8 * 3600


def test_activity_moves_the_session_expiry_forward(client: Client, user: Any) -> None:
    client.post("/login/", RIGHT)
    before = idle_for(client, 3600).expire_date
    response = client.get("/")
    assert response.status_code == 200
    after = session_of(client).expire_date
    assert after - before > timedelta(minutes=59)
    cookie = response.cookies[django_settings.SESSION_COOKIE_NAME]
    assert cookie["max-age"] == django_settings.SESSION_COOKIE_AGE


def test_the_dashboards_own_timed_refresh_is_not_activity(client: Client, user: Any) -> None:
    client.post("/login/", RIGHT)
    before = idle_for(client, 3600).expire_date
    response = client.get("/", HTTP_HX_REQUEST="true", HTTP_X_CAPVCO_POLL="true")
    assert response.status_code == 200
    assert session_of(client).expire_date == before


def test_a_session_idle_for_longer_than_the_timeout_is_logged_out(
    client: Client, user: Any
) -> None:
    client.post("/login/", RIGHT)
    row = session_of(client)
    row.expire_date = timezone.now() - timedelta(seconds=1)
    row.save()
    assert client.get("/").status_code == 302


def test_the_dashboard_polls_with_the_header_that_says_so(logged_in_client: Client) -> None:
    assert b'"X-Capvco-Poll": "true"' in logged_in_client.get("/").content


# --- response headers --------------------------------------------------------------------


class InlineCode(HTMLParser):
    """Collects what a strict Content-Security-Policy would block in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and not names.get("src") and names.get("type") != "application/json":
            self.found.append("inline <script>")
        if tag == "style":
            self.found.append("<style> element")
        for name in names:
            if name == "style" or name.startswith("on"):
                self.found.append(f"{name}= on <{tag}>")
            if name.startswith("hx-on"):
                self.found.append(f"{name} (htmx eval) on <{tag}>")


def inline_code(html: bytes) -> list[str]:
    parser = InlineCode()
    parser.feed(html.decode())
    return parser.found


def test_pages_carry_a_content_security_policy_of_our_own_origin_only(
    logged_in_client: Client,
) -> None:
    policy = logged_in_client.get("/")["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy


@pytest.mark.parametrize("path", ["/", "/login/"])
def test_our_pages_hold_no_inline_script_or_style(client: Client, user: Any, path: str) -> None:
    if path == "/":
        client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    assert inline_code(response.content) == []
    assert response["Content-Security-Policy"]


def test_htmx_is_told_not_to_inject_its_style_and_ours_has_the_indicator(
    logged_in_client: Client,
) -> None:
    page = logged_in_client.get("/").content.decode()
    assert '"includeIndicatorStyles": false' in page
    assert '"allowEval": false' in page
    css = (django_settings.BASE_DIR / "static/css/capvco.css").read_text()
    assert ".htmx-request .htmx-indicator" in css


def test_the_lockout_page_holds_no_inline_script_or_style(client: Client, user: Any) -> None:
    fail_logins(client)
    response = client.post("/login/", RIGHT)
    assert response.status_code == 429
    assert inline_code(response.content) == []


@pytest.mark.parametrize("path", ["/api/v1/", "/api/v1/clusters/", "/api/v1/nowhere/"])
def test_api_answers_are_never_stored_by_a_cache(logged_in_client: Client, path: str) -> None:
    assert logged_in_client.get(path)["Cache-Control"] == "no-store"


def test_an_api_refusal_is_not_stored_either(client: Client) -> None:
    assert client.get("/api/v1/clusters/")["Cache-Control"] == "no-store"


def test_a_user_over_the_api_rate_gets_429_with_retry_after(
    logged_in_client: Client, settings: Any
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "user": "3/minute",
        },
    }
    statuses = [logged_in_client.get("/api/v1/clusters/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = logged_in_client.get("/api/v1/clusters/")
    assert 0 < int(response["Retry-After"]) <= 60
    assert "throttled" in response.json()["detail"]
