"""API tokens: made and shown once, kept as a hash, used as `Bearer`, revoked, audited."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from capvco_web.models import ApiToken, AuditEvent
from capvco_web.tokens import api_token_create
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/tokens/"


@pytest.fixture
def made(user: User) -> tuple[ApiToken, str]:
    return api_token_create(user=user, name="ci", actor=user)


def bearer(raw: str, keyword: str = "Bearer") -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"{keyword} {raw}")
    return api


def test_a_logged_in_user_makes_a_token_and_sees_it_once(
    logged_in_client: Client, user: User
) -> None:
    response = logged_in_client.post(
        TOKENS, {"name": "deploy script"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    raw = body["token"]
    assert raw.startswith(f"{body['prefix']}_")
    assert body["name"] == "deploy script" and body["expires_at"] is None
    assert response["Cache-Control"] == "no-store"

    listed = logged_in_client.get(TOKENS).json()["results"]
    shown = logged_in_client.get(f"{TOKENS}{body['id']}/").json()
    assert [t["prefix"] for t in listed] == [body["prefix"]]
    assert "token" not in listed[0] and "token" not in shown
    assert raw not in str(listed) + str(shown)


def test_the_tokens_page_makes_a_token_with_a_form_not_raw_json(user: User) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    page = browser.get(TOKENS, HTTP_ACCEPT="text/html")
    html = page.content.decode()
    form = html[html.index('id="post-object-form"') :]
    assert 'name="name"' in form and 'name="expires_at"' in form
    assert 'type="datetime-local"' in form
    csrf = page.cookies["csrftoken"].value

    made = browser.post(
        TOKENS,
        {"name": "nightly backup", "expires_at": "2030-01-31T12:00", "csrfmiddlewaretoken": csrf},
        HTTP_ACCEPT="text/html",
    )
    never = browser.post(
        TOKENS, {"name": "no expiry", "expires_at": "", "csrfmiddlewaretoken": csrf}
    )
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(user)
    refused = forged.post(TOKENS, {"name": "forged"})

    assert made.status_code == 201, made.content
    token = ApiToken.objects.get(name="nightly backup")
    assert token.expires_at is not None and token.expires_at.year == 2030
    assert f"{token.key_id}_" in made.content.decode()  # shown this once
    assert never.status_code == 201 and never.json()["expires_at"] is None
    assert refused.status_code == 403  # a form post needs the page's CSRF token
    assert not ApiToken.objects.filter(name="forged").exists()


def test_only_a_hash_of_the_token_is_stored(made: tuple[ApiToken, str]) -> None:
    token, raw = made
    row = ApiToken.objects.filter(pk=token.pk).values().get()
    assert row["token_hash"] == hashlib.sha256(raw.encode()).hexdigest()
    secret = raw.partition(f"{token.key_id}_")[2]  # the secret may hold "_" itself
    assert not any(secret in str(value) for value in row.values())


def test_making_and_revoking_a_token_is_audited_without_the_token(
    logged_in_client: Client, user: User
) -> None:
    body = logged_in_client.post(TOKENS, {"name": "ci"}, content_type="application/json").json()
    assert logged_in_client.delete(f"{TOKENS}{body['id']}/").status_code == 204
    events = list(AuditEvent.objects.filter(object_type="capvco_web.ApiToken").order_by("id"))
    assert [(e.action, e.actor) for e in events] == [
        ("api_token.create", user),
        ("api_token.revoke", user),
    ]
    assert events[0].after["prefix"] == body["prefix"]
    assert body["token"] not in str([(e.before, e.after, e.object_repr) for e in events])


@pytest.mark.parametrize("keyword", ["Bearer", "Token", "bearer"])
def test_a_token_authenticates_api_calls(made: tuple[ApiToken, str], keyword: str) -> None:
    response = bearer(made[1], keyword).get("/api/v1/clusters/")
    assert response.status_code == 200


def test_a_revoked_token_answers_401(made: tuple[ApiToken, str], user: User) -> None:
    token, raw = made
    api = bearer(raw)
    assert api.get("/api/v1/clusters/").status_code == 200
    assert api.delete(f"{TOKENS}{token.pk}/").status_code == 204
    response = api.get("/api/v1/clusters/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert "revoked" in response.json()["detail"]


@pytest.mark.parametrize(
    "mangle",
    [lambda raw: raw[:-1] + ("A" if raw[-1] != "A" else "B"), lambda raw: "capvco_", str.upper],
)
def test_a_wrong_token_answers_401(made: tuple[ApiToken, str], mangle: Any) -> None:
    response = bearer(mangle(made[1])).get("/api/v1/clusters/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_an_expired_token_answers_401_saying_so(user: User) -> None:
    token, raw = api_token_create(
        user=user, name="short", actor=user, expires_at=timezone.now() + timedelta(hours=1)
    )
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer(raw).get("/api/v1/clusters/")
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_the_token_of_a_deactivated_user_answers_401(made: tuple[ApiToken, str]) -> None:
    User.objects.filter(pk=made[0].user_id).update(is_active=False)
    assert bearer(made[1]).get("/api/v1/clusters/").status_code == 401


def test_last_used_is_written_on_use_but_at_most_once_a_minute(
    made: tuple[ApiToken, str],
) -> None:
    token, raw = made
    assert token.last_used_at is None
    bearer(raw).get("/api/v1/clusters/")
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None and timezone.now() - first < timedelta(seconds=5)

    recent = timezone.now() - timedelta(seconds=30)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=recent)
    bearer(raw).get("/api/v1/clusters/")
    token.refresh_from_db()
    assert token.last_used_at == recent  # no write within the minute

    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now() - timedelta(minutes=2))
    bearer(raw).get("/api/v1/clusters/")
    token.refresh_from_db()
    assert timezone.now() - token.last_used_at < timedelta(seconds=5)


def test_a_token_cannot_make_tokens(made: tuple[ApiToken, str]) -> None:
    response = bearer(made[1]).post(TOKENS, {"name": "successor"}, format="json")
    assert response.status_code == 403
    assert "log in" in response.json()["detail"]
    assert ApiToken.objects.count() == 1


def test_a_token_lists_its_users_tokens(made: tuple[ApiToken, str]) -> None:
    api = bearer(made[1])
    assert [t["name"] for t in api.get(TOKENS).json()["results"]] == ["ci"]


def test_another_users_tokens_are_not_found(made: tuple[ApiToken, str]) -> None:
    other = Client()
    other.force_login(UserFactory())
    assert other.get(f"{TOKENS}{made[0].pk}/").status_code == 404
    assert other.delete(f"{TOKENS}{made[0].pk}/").status_code == 404
    assert other.get(TOKENS).json()["results"] == []
    assert bearer(made[1]).get("/api/v1/clusters/").status_code == 200


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "   "}, "name"),
        ({}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ci", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "ci", "expires_at": "soon"}, "expires_at"),
    ],
)
def test_a_bad_token_request_is_refused_naming_the_field(
    logged_in_client: Client, data: dict[str, str], field: str
) -> None:
    response = logged_in_client.post(TOKENS, data, content_type="application/json")
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert ApiToken.objects.count() == 0


def test_a_token_with_an_expiry_is_made(logged_in_client: Client) -> None:
    when = (timezone.now() + timedelta(days=30)).isoformat()
    response = logged_in_client.post(
        TOKENS, {"name": "month", "expires_at": when}, content_type="application/json"
    )
    assert response.status_code == 201
    assert response.json()["expires_at"] is not None


def test_refused_tokens_from_one_address_are_throttled_with_retry_after(
    made: tuple[ApiToken, str],
) -> None:
    limit = int(
        django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["failed_token_auth"].split("/")[0]
    )
    wrong = bearer("capvco_000000000000_guess")
    statuses = [wrong.get("/api/v1/clusters/").status_code for _ in range(limit)]
    assert statuses == [401] * limit
    response = wrong.get("/api/v1/clusters/")
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 60
    assert "Too many refused tokens" in response.json()["detail"]
    # While throttled, no token from that address is even looked at.
    assert bearer(made[1]).get("/api/v1/clusters/").status_code == 429


def test_the_token_is_never_logged(
    logged_in_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        raw = logged_in_client.post(TOKENS, {"name": "ci"}, content_type="application/json").json()[
            "token"
        ]
        bearer(raw).get("/api/v1/clusters/")
        bearer(raw + "x").get("/api/v1/clusters/")
    assert raw not in caplog.text


# --- the admin -----------------------------------------------------------------------------


def test_an_admin_makes_a_token_for_a_user_and_sees_it_once(
    admin_client: Client, admin_user: User, user: User
) -> None:
    response = admin_client.post(
        reverse("admin:capvco_web_apitoken_add"), {"user": user.pk, "name": "for operator"}
    )
    assert response.status_code == 200
    token = ApiToken.objects.get()
    raw = response.context["raw"]
    assert raw in response.content.decode()
    assert token.user == user and token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert AuditEvent.objects.get(action="api_token.create").actor == admin_user
    page = admin_client.get(reverse("admin:capvco_web_apitoken_change", args=[token.pk]))
    assert raw not in page.content.decode()
    assert bearer(raw).get("/api/v1/clusters/").status_code == 200


def test_the_admin_refuses_an_expiry_in_the_past(admin_client: Client, user: User) -> None:
    response = admin_client.post(
        reverse("admin:capvco_web_apitoken_add"),
        {"user": user.pk, "name": "old", "expires_at_0": "2001-01-01", "expires_at_1": "00:00"},
    )
    assert response.status_code == 200
    assert "The expiry must be in the future." in response.content.decode()
    assert ApiToken.objects.count() == 0


def test_an_admin_revokes_tokens_audited(
    admin_client: Client, admin_user: User, made: tuple[ApiToken, str]
) -> None:
    token, raw = made
    listed = admin_client.get(reverse("admin:capvco_web_apitoken_changelist"))
    assert token.prefix in listed.content.decode() and raw not in listed.content.decode()
    response = admin_client.post(
        reverse("admin:capvco_web_apitoken_changelist"),
        {"action": "delete_selected", "_selected_action": [token.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not ApiToken.objects.exists()
    assert AuditEvent.objects.get(action="api_token.revoke").actor == admin_user
    assert bearer(raw).get("/api/v1/clusters/").status_code == 401


# --- over the wire -------------------------------------------------------------------------


def test_a_token_over_http_and_the_401_without_one(
    live_server: Any, made: tuple[ApiToken, str]
) -> None:
    url = f"{live_server.url}/api/v1/clusters/"
    ok = requests.get(url, headers={"Authorization": f"Bearer {made[1]}"}, timeout=10)
    assert ok.status_code == 200
    assert ok.headers["Cache-Control"] == "no-store"
    refused = requests.get(url, timeout=10)
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="api"'
