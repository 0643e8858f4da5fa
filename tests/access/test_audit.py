"""Every create, update and delete of an account, site, pool, cluster or membership, through
the API or the admin, writes an audit record: who, what, the fields before and after,
never a secret's value. A site or a pool cannot move once created."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from capvco_web.api_urls import router
from capvco_web.models import AuditEvent
from capvco_web.permissions import ROLE_PERMISSIONS, AccountScopedViewSetMixin
from cloud.models import Account, Membership
from clusters.models import ClusterSite, MachinePool
from tests.access.conftest import World, caller_make, newcomer_known_to_admins_of
from tests.clusters.test_admin import cluster_page_data
from tests.factories import JWT, LocationFactory, UserFactory

pytestmark = pytest.mark.django_db

NEW_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJuZXcifQ.bmV3LXNpZ25hdHVyZQ"


def api_as(user: User) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def no_secret_recorded() -> None:
    recorded = json.dumps(list(AuditEvent.objects.values("before", "after", "reason")))
    assert JWT not in recorded
    assert NEW_JWT not in recorded


# --- through the API -----------------------------------------------------------------------


def test_account_changes_are_audited_and_a_credential_only_as_changed(world: World) -> None:
    superuser = caller_make("superuser", world)
    api = api_as(superuser)
    body = {
        "name": "new", "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
        "customer_id": "c-new", "credential": JWT,
    }  # fmt: skip

    created = api.post("/api/v1/accounts/", body, format="json").json()
    url = f"/api/v1/accounts/{created['id']}/"
    api.patch(url, {"credential": NEW_JWT, "orphan_confirmations": 4}, format="json")
    api.patch(url, {"orphan_confirmations": 4}, format="json")  # nothing changes
    api.delete(url, {"reason": "moved away"}, format="json")

    (create,) = events("account.create")
    assert (create.actor, create.object_repr) == (superuser, "new")
    assert create.after is not None
    assert create.after["credential"] == "(secret)"
    assert create.after["api_url"] == "https://vco.example/api/1"
    (update,) = events("account.update")
    assert (update.before, update.after) == (
        {"credential": "(secret)", "orphan_confirmations": 3},
        {"credential": "(secret, changed)", "orphan_confirmations": 4},
    )
    (delete,) = events("account.delete")
    assert delete.reason == "moved away"
    no_secret_recorded()


def test_site_pool_and_cluster_changes_are_audited_with_before_and_after(world: World) -> None:
    admin = caller_make("admin", world)
    api = api_as(admin)
    own = world.own

    cluster = api.post(
        "/api/v1/clusters/", {"name": "fresh", "account": own.account.pk}, format="json"
    ).json()
    site = api.post(
        "/api/v1/sites/",
        {"cluster": cluster["id"], "location": own.spare_location.pk, "cloudspace_id": "cs-9",
         "image_id": 7},
        format="json",
    ).json()  # fmt: skip
    pool = api.post(
        "/api/v1/pools/",
        {"cluster": cluster["id"], "site": site["id"], "name": "cpu", "replicas": 0},
        format="json",
    ).json()
    api.patch(f"/api/v1/sites/{site['id']}/", {"image_id": 8}, format="json")
    api.patch(f"/api/v1/pools/{pool['id']}/", {"replicas": 2, "vcpus": 8}, format="json")
    api.delete(f"/api/v1/pools/{pool['id']}/", {"reason": "unused"}, format="json")

    assert [e.after for e in events("cluster.create")] == [
        {
            "name": "fresh",
            "account": str(own.account),
            "state": "active",
            "kubeconfig": "",
            "gpu_addon": False,
        }
    ]
    (site_create,) = events("site.create")
    assert site_create.after == {
        "cluster": "fresh", "location": str(own.spare_location), "cloudspace_id": "cs-9",
        "image_id": 7, "observation_error": "",
    }  # fmt: skip
    assert [(e.before, e.after) for e in events("site.update")] == [
        ({"image_id": 7}, {"image_id": 8})
    ]
    assert [e.after["name"] for e in events("pool.create") if e.after] == ["cpu"]
    assert [(e.before, e.after) for e in events("pool.update")] == [
        ({"replicas": 0, "vcpus": 4}, {"replicas": 2, "vcpus": 8})
    ]
    assert [e.reason for e in events("pool.delete")] == ["unused"]
    assert {e.actor for e in AuditEvent.objects.all()} == {admin}


def test_membership_changes_are_audited(world: World) -> None:
    api = api_as(caller_make("admin", world))
    newcomer = newcomer_known_to_admins_of(world.own.account, "newcomer")

    made = api.post(
        "/api/v1/memberships/",
        {"user": "newcomer", "account": world.own.account.pk, "role": "viewer"},
        format="json",
    ).json()
    api.patch(f"/api/v1/memberships/{made['id']}/", {"role": "operator"}, format="json")
    api.delete(f"/api/v1/memberships/{made['id']}/")

    assert [e.after for e in events("membership.create")] == [
        {"user": "newcomer", "account": str(world.own.account), "role": "viewer"}
    ]
    assert [(e.before, e.after) for e in events("membership.update")] == [
        ({"role": "viewer"}, {"role": "operator"})
    ]
    assert [e.before for e in events("membership.delete")] == [
        {"user": "newcomer", "account": str(world.own.account), "role": "operator"}
    ]
    assert not Membership.objects.filter(user=newcomer, account=world.own.account).exists()


def test_an_account_admin_cannot_move_a_membership_to_another_account(world: World) -> None:
    api = api_as(caller_make("admin", world))
    membership = world.own.membership

    response = api.patch(
        f"/api/v1/memberships/{membership.pk}/",
        {"account": world.other.account.pk},
        format="json",
    )

    # Another account is one that does not exist for them (409, as for any missing object).
    assert response.status_code == 409
    assert "account" in response.json()["fields"]
    assert Membership.objects.get(pk=membership.pk).account == world.own.account


def test_whoever_creates_an_account_becomes_its_admin(world: World) -> None:
    user = UserFactory()
    user.user_permissions.add(Permission.objects.get(codename="add_account"))
    api = api_as(user)

    response = api.post(
        "/api/v1/accounts/",
        {"name": "theirs", "api_url": "https://vco.example/api/1",
         "iam_url": "https://iam.example", "customer_id": "c-t", "credential": JWT},
        format="json",
    )  # fmt: skip

    assert response.status_code == 201
    account = Account.objects.get(name="theirs")
    assert Membership.objects.get(user=user, account=account).role.name == "admin"
    assert api_as(user).get(f"/api/v1/accounts/{account.pk}/").status_code == 200
    assert [e.actor_name for e in events("membership.create")] == ["account-create"]


# --- a site or pool stays where it was made ------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("location", "spare_location"), ("cloudspace_id", "cs-elsewhere"), ("cluster", "other")],
)
def test_moving_a_site_is_refused_naming_the_field(world: World, field: str, value: str) -> None:
    own = world.own
    api = api_as(caller_make("superuser", world))
    if value == "spare_location":
        body: dict[str, Any] = {field: own.spare_location.pk}
    elif value == "other":
        body = {field: ClusterSite.objects.exclude(cluster=own.cluster).first().cluster_id}  # type: ignore[union-attr]
    else:
        body = {field: value}

    response = api.patch(f"/api/v1/sites/{own.site.pk}/", body, format="json")

    assert response.status_code == 409  # against the stored site, as a rename
    assert list(response.json()["fields"]) == [field]
    assert "cannot move" in response.json()["fields"][field][0]
    site = ClusterSite.objects.get(pk=own.site.pk)
    assert (site.location, site.cloudspace_id) == (own.site.location, own.site.cloudspace_id)
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("field", ["cluster", "site"])
def test_moving_a_pool_is_refused_naming_the_field(world: World, field: str) -> None:
    own = world.own
    api = api_as(caller_make("superuser", world))
    target = own.empty_site  # another site of the same cluster
    body = {"site": target.pk} if field == "site" else {"cluster": world.other.cluster.pk}

    response = api.patch(f"/api/v1/pools/{own.pool.pk}/", body, format="json")

    assert response.status_code == 409  # against the stored pool, as a rename
    assert "cannot move" in response.json()["fields"][field][0]
    assert MachinePool.objects.get(pk=own.pool.pk).site == own.site


# --- through the admin ---------------------------------------------------------------------


def test_admin_changes_go_through_the_audited_services(world: World) -> None:
    client = Client()
    client.force_login(caller_make("admin", world))
    own = world.own

    account_page = reverse("admin:cloud_account_change", args=[own.account.pk])
    client.post(
        account_page,
        {"name": own.account.name, "api_url": own.account.api_url,
         "iam_url": own.account.iam_url, "customer_id": own.account.customer_id,
         "orphan_auto_release": "on", "orphan_grace_period": "01:00:00",
         "orphan_confirmations": 3, "new_credential": NEW_JWT},
    )  # fmt: skip
    site_page = reverse("admin:clusters_clustersite_change", args=[own.site.pk])
    client.post(site_page, {"image_id": 99})
    url, data = cluster_page_data(client, own.cluster)
    location = LocationFactory(account=own.account)
    total = int(data["sites-TOTAL_FORMS"])
    data.update(
        {
            "sites-TOTAL_FORMS": str(total + 1),
            f"sites-{total}-location": location.pk,
            f"sites-{total}-cloudspace_id": "cs-inline",
            f"sites-{total}-image_id": 5,
        }
    )
    client.post(url, data)

    (account,) = events("account.update")
    assert (account.before, account.after) == (
        {"credential": "(secret)"},
        {"credential": "(secret, changed)"},
    )
    assert Account.objects.get(pk=own.account.pk).credential == NEW_JWT
    (site,) = events("site.update")
    assert (site.before, site.after) == ({"image_id": own.site.image_id}, {"image_id": 99})
    (inline,) = events("site.create")
    assert inline.after is not None and inline.after["cloudspace_id"] == "cs-inline"
    no_secret_recorded()


# --- the roles themselves ------------------------------------------------------------------


def test_role_groups_hold_the_permissions_the_code_names() -> None:
    found = {
        group.name: {
            f"{p.content_type.app_label}.{p.codename}"
            for p in group.permissions.select_related("content_type")
        }
        for group in Group.objects.filter(name__in=ROLE_PERMISSIONS)
    }
    assert found == {role: set(perms) for role, perms in ROLE_PERMISSIONS.items()}


def test_every_api_viewset_scopes_to_the_callers_accounts() -> None:
    users_own = {"tokens", "saved-views"}  # a user's own objects, of no account
    unscoped = [
        prefix
        for prefix, viewset, _ in router.registry
        if not issubclass(viewset, AccountScopedViewSetMixin) and prefix not in users_own
    ]
    assert unscoped == []
