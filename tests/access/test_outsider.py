"""A signed-in user who belongs to no account, and holds no permission, can neither see
nor change anything: others' objects answer 404 (their existence is not told), creating
answers 403, and nothing changes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from cloud.models import Account
from clusters.models import Cluster, ClusterSite
from tests.factories import ClusterSiteFactory, UserFactory

pytestmark = pytest.mark.django_db

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhcGkifQ.c2lnbmF0dXJl"


@pytest.fixture
def outsider() -> APIClient:
    user: User = UserFactory()
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def site() -> ClusterSite:
    return ClusterSiteFactory()  # type: ignore[no-any-return]


def test_outsider_cannot_point_an_account_at_another_host(
    outsider: APIClient, site: ClusterSite
) -> None:
    account = site.cluster.account
    response = outsider.patch(
        f"/api/v1/accounts/{account.pk}/",
        {"api_url": "https://attacker.example/api/1", "credential": JWT},
        format="json",
    )
    assert response.status_code == 404
    account.refresh_from_db()
    assert account.api_url == "https://vco.example/api/1"


def test_outsider_cannot_create_an_account(outsider: APIClient) -> None:
    response = outsider.post(
        "/api/v1/accounts/",
        {"name": "mine", "api_url": "https://vco.example/api/1",
         "iam_url": "https://iam.example", "customer_id": "c9", "credential": JWT},
        format="json",
    )  # fmt: skip
    assert response.status_code == 403
    assert not Account.objects.filter(name="mine").exists()


def test_outsider_cannot_create_a_cluster_in_an_account(
    outsider: APIClient, site: ClusterSite
) -> None:
    response = outsider.post(
        "/api/v1/clusters/", {"name": "mine", "account": site.cluster.account_id}, format="json"
    )
    assert response.status_code == 403
    assert not Cluster.objects.filter(name="mine").exists()


def test_outsider_cannot_delete_a_site(outsider: APIClient, site: ClusterSite) -> None:
    response = outsider.delete(f"/api/v1/sites/{site.pk}/", {"reason": "x"}, format="json")
    assert response.status_code == 404
    assert ClusterSite.objects.filter(pk=site.pk).exists()


def test_outsider_cannot_delete_a_cluster(outsider: APIClient, site: ClusterSite) -> None:
    response = outsider.delete(
        f"/api/v1/clusters/{site.cluster_id}/", {"reason": "x"}, format="json"
    )
    assert response.status_code == 404
    assert Cluster.objects.get(pk=site.cluster_id).state == Cluster.State.ACTIVE


def test_outsider_sees_no_account_and_no_cluster(outsider: APIClient, site: ClusterSite) -> None:
    assert outsider.get("/api/v1/accounts/").json()["results"] == []
    assert outsider.get("/api/v1/clusters/").json()["results"] == []
    assert outsider.get(f"/api/v1/clusters/{site.cluster_id}/").status_code == 404
