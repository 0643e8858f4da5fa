"""An account's credential goes only where WHITESKY_ALLOWED_HOSTS allows: the model refuses
other URLs (API, admin), the client refuses rows written any other way, changing a URL
needs the credential again and is audited, and the credential stays write-only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.integrations import whitesky as ws
from capvco_web.models import AuditEvent
from cloud.models import Account
from cloud.services import account_update
from cloud.whitesky import whitesky_client
from clusters.models import ClusterSite
from clusters.tasks import observe_account
from tests.cloud.conftest import JWT
from tests.http_stub import HttpStub, Reply, html

pytestmark = pytest.mark.django_db

OTHER_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvdGhlciJ9.b3RoZXItc2lnbmF0dXJl"
PAGE = "collected, thank you"
MakeStub = Callable[[Reply], HttpStub]


def account_body(**changes: Any) -> dict[str, Any]:
    return {
        "name": "b", "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
        "customer_id": "c2", "credential": JWT, **changes,
    }  # fmt: skip


def allow(settings: Any, *entries: str) -> None:
    settings.WHITESKY_ALLOWED_HOSTS = [*settings.WHITESKY_ALLOWED_HOSTS, *entries]


# --- the allow-list, in the model --------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "url", "why"),
    [
        ("api_url", "https://collector.example/api/1", "collector.example is not in WHITESKY_"),
        ("api_url", "http://vco.example/api/1", "use https"),
        ("iam_url", "https://collector.example", "collector.example is not in WHITESKY_"),
        ("iam_url", "https://vco.example@collector.example", "user or password"),
    ],
)
def test_api_refuses_a_url_outside_the_allowed_hosts(
    api: APIClient, field: str, url: str, why: str
) -> None:
    response = api.post("/api/v1/accounts/", account_body(**{field: url}), format="json")
    assert response.status_code == 400
    assert why in response.json()["fields"][field][0]
    assert not Account.objects.exists()


def test_an_http_origin_listed_as_such_is_allowed(api: APIClient, settings: Any) -> None:
    allow(settings, "http://127.0.0.1:8081")
    body = account_body(api_url="http://127.0.0.1:8081/api/1", iam_url="http://127.0.0.1:8081")
    assert api.post("/api/v1/accounts/", body, format="json").status_code == 201


def test_admin_refuses_a_url_outside_the_allowed_hosts(admin_client: Client) -> None:
    response = admin_client.post(
        reverse("admin:cloud_account_add"),
        {**admin_form(Account(orphan_confirmations=3)), "name": "b", "customer_id": "c2",
         "api_url": "https://collector.example/api/1", "new_credential": JWT},
    )  # fmt: skip
    assert response.status_code == 200
    assert "collector.example is not in WHITESKY_ALLOWED_HOSTS" in response.content.decode()
    assert not Account.objects.exists()


# --- the allow-list, in the client --------------------------------------------------------


def test_client_of_an_account_row_pointing_elsewhere_sends_nothing(
    site: ClusterSite, http_stub: MakeStub
) -> None:
    collector = http_stub(html(200, PAGE))
    account = site.cluster.account
    # Written around the model's validation (a shell, an import, an old row).
    Account.objects.filter(pk=account.pk).update(api_url=f"{collector.origin}/api/1")
    account.refresh_from_db()

    with whitesky_client(account) as client, pytest.raises(ws.HostNotAllowed) as caught:
        client.current_user()

    assert collector.received == []
    assert "credential not sent" in str(caught.value)


def test_worker_observing_an_account_pointing_elsewhere_sends_nothing(
    site: ClusterSite, http_stub: MakeStub, run_tasks: Any
) -> None:
    collector = http_stub(html(200, PAGE))
    Account.objects.filter(pk=site.cluster.account_id).update(
        api_url=f"{collector.origin}/api/1", iam_url=collector.origin
    )
    with pytest.raises(ws.HostNotAllowed):
        observe_account.apply(args=[site.cluster.account_id], throw=True)
    assert collector.received == []


def test_failure_from_an_allowed_host_answering_html_carries_no_html(
    site: ClusterSite, http_stub: MakeStub, settings: Any
) -> None:
    proxy = http_stub(html(500, PAGE))
    allow(settings, proxy.origin)
    account = site.cluster.account
    account_update(
        account=account,
        changes={"api_url": f"{proxy.origin}/api/1", "credential": JWT},
        actor=SystemActor.RECONCILER,
    )

    with whitesky_client(account) as client, pytest.raises(ws.ResponseLost) as caught:
        client.create_cloudspace(name="x", location="nl-1")

    assert PAGE not in str(caught.value) and "<" not in str(caught.value)
    assert "Internal Server Error" in str(caught.value)


# --- changing a URL needs the credential again, and is audited ---------------------------


def test_api_url_change_without_the_credential_is_refused(
    api: APIClient, site: ClusterSite, settings: Any
) -> None:
    allow(settings, "vco2.example")
    account = site.cluster.account
    response = api.patch(
        f"/api/v1/accounts/{account.pk}/", {"api_url": "https://vco2.example/api/1"}, format="json"
    )
    # A conflict with the stored URL (the same change keeping it would pass): 409.
    assert response.status_code == 409
    assert "again" in response.json()["fields"]["credential"][0]
    account.refresh_from_db()
    assert account.api_url == "https://vco.example/api/1"
    assert not AuditEvent.objects.exists()


def test_api_url_change_with_the_credential_is_audited_without_the_secret(
    api: APIClient, site: ClusterSite, settings: Any
) -> None:
    allow(settings, "vco2.example", "iam2.example")
    account = site.cluster.account
    response = api.patch(
        f"/api/v1/accounts/{account.pk}/",
        {"api_url": "https://vco2.example/api/1", "iam_url": "https://iam2.example",
         "credential": OTHER_JWT},
        format="json",
    )  # fmt: skip
    assert response.status_code == 200, response.json()
    assert "credential" not in response.json()
    account.refresh_from_db()
    assert (account.api_url, account.credential) == ("https://vco2.example/api/1", OTHER_JWT)
    event = AuditEvent.objects.get(action="account.update")
    assert event.actor_name == "ops"
    assert event.before == {
        "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
        "credential": "(secret)",
    }  # fmt: skip
    assert event.after == {
        "api_url": "https://vco2.example/api/1", "iam_url": "https://iam2.example",
        "credential": "(secret, changed)",
    }  # fmt: skip
    assert OTHER_JWT not in str(event.before) + str(event.after)
    assert JWT not in str(event.before) + str(event.after)


def test_a_change_that_keeps_the_urls_needs_no_credential_and_is_audited(
    api: APIClient, site: ClusterSite
) -> None:
    account = site.cluster.account
    response = api.patch(
        f"/api/v1/accounts/{account.pk}/",
        {"orphan_grace_period": "02:00:00", "api_url": account.api_url},
        format="json",
    )
    assert response.status_code == 200, response.json()
    event = AuditEvent.objects.get(action="account.update")
    assert (event.before, event.after) == (
        {"orphan_grace_period": "01:00:00"},
        {"orphan_grace_period": "02:00:00"},
    )


def test_a_change_that_changes_nothing_is_not_audited(api: APIClient, site: ClusterSite) -> None:
    account = site.cluster.account
    response = api.patch(f"/api/v1/accounts/{account.pk}/", {"name": "acme"}, format="json")
    assert response.status_code == 200
    assert not AuditEvent.objects.exists()


def test_service_refuses_a_url_change_without_the_credential(site: ClusterSite) -> None:
    account = site.cluster.account
    with pytest.raises(ValidationError) as caught:
        account_update(
            account=account,
            changes={"iam_url": "https://vco.example"},
            actor=SystemActor.RECONCILER,
        )
    assert "credential" in caught.value.message_dict


def admin_form(account: Account, **changes: Any) -> dict[str, Any]:
    grace = account.orphan_grace_period
    data = {
        "name": account.name, "api_url": account.api_url, "iam_url": account.iam_url,
        "customer_id": account.customer_id, "orphan_auto_release": "on",
        "orphan_grace_period": str(grace) if grace is not None else "01:00:00",
        "orphan_confirmations": account.orphan_confirmations, "new_credential": "",
    }  # fmt: skip
    return {**data, **changes}


def test_admin_url_change_without_the_credential_is_refused(
    admin_client: Client, site: ClusterSite, settings: Any
) -> None:
    allow(settings, "vco2.example")
    account = site.cluster.account
    url = reverse("admin:cloud_account_change", args=[account.pk])
    response = admin_client.post(url, admin_form(account, api_url="https://vco2.example/api/1"))
    assert response.status_code == 200
    assert "Give the credential again" in response.content.decode()
    account.refresh_from_db()
    assert account.api_url == "https://vco.example/api/1"


def test_admin_url_change_with_the_credential_is_audited_as_the_user(
    admin_client: Client, admin_user: Any, site: ClusterSite, settings: Any
) -> None:
    allow(settings, "vco2.example")
    account = site.cluster.account
    url = reverse("admin:cloud_account_change", args=[account.pk])
    response = admin_client.post(
        url, admin_form(account, api_url="https://vco2.example/api/1", new_credential=OTHER_JWT)
    )
    assert response.status_code == 302
    account.refresh_from_db()
    assert (account.api_url, account.credential) == ("https://vco2.example/api/1", OTHER_JWT)
    event = AuditEvent.objects.get(action="account.update")
    assert event.actor == admin_user
    assert event.after == {
        "api_url": "https://vco2.example/api/1", "credential": "(secret, changed)"
    }  # fmt: skip


def test_admin_never_shows_the_credential(admin_client: Client, site: ClusterSite) -> None:
    account = site.cluster.account
    page = admin_client.get(reverse("admin:cloud_account_change", args=[account.pk]))
    assert page.status_code == 200
    assert JWT not in page.content.decode()


# --- the credential's shape ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("credential", "why"),
    [
        ("not-a-jwt", "JWT"),
        ("a.b", "JWT"),
        ("a.b.c.d", "JWT"),
        ("eyJh+bGc.eyJz.c2ln", "JWT"),
        ("eyJ" + "a" * 9000 + ".eyJz.c2ln", "no more than 8192"),
    ],
)
def test_api_refuses_a_credential_that_is_no_jwt(api: APIClient, credential: str, why: str) -> None:
    response = api.post("/api/v1/accounts/", account_body(credential=credential), format="json")
    assert response.status_code == 400
    assert why in str(response.json()["fields"]["credential"])
    assert not Account.objects.exists()


def test_model_refuses_a_credential_with_a_trailing_line_break(site: ClusterSite) -> None:
    account = site.cluster.account
    account.credential = f"{JWT}\n"
    with pytest.raises(ValidationError) as caught:
        account.full_clean()
    assert "credential" in caught.value.message_dict


def test_admin_refuses_a_credential_that_is_no_jwt(admin_client: Client) -> None:
    response = admin_client.post(
        reverse("admin:cloud_account_add"),
        {**admin_form(Account(orphan_confirmations=3)), "name": "b", "customer_id": "c2",
         "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
         "new_credential": "not-a-jwt"},
    )  # fmt: skip
    assert response.status_code == 200
    assert "three base64url parts" in response.content.decode()
    assert not Account.objects.exists()


def test_account_credential_is_write_only_and_stored_encrypted(api: APIClient) -> None:
    response = api.post(
        "/api/v1/accounts/",
        {"name": "b", "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
         "customer_id": "c2", "credential": JWT},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    assert "credential" not in response.json()
    assert JWT not in api.get("/api/v1/accounts/").content.decode()
    with connection.cursor() as cursor:
        cursor.execute("SELECT credential FROM cloud_account WHERE name = 'b'")
        assert JWT not in cursor.fetchone()[0]
    assert Account.objects.get(name="b").credential == JWT
