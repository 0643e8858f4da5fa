"""An account admin knows the members of the accounts they administer, and no other user:
the admin's membership form offers only those, and giving a role to a user name they may
not know answers exactly as for a user name nobody has (API and admin)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from cloud.models import Membership
from tests.factories import AccountFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> dict[str, Any]:
    own, other = AccountFactory(name="acme"), AccountFactory(name="globex")
    admin = UserFactory(username="acme-admin", is_staff=True)
    MembershipFactory(user=admin, account=own, role="admin")
    colleague = UserFactory(username="alice")
    MembershipFactory(user=colleague, account=own, role="viewer")
    MembershipFactory(user=colleague, account=other, role="viewer")
    stranger = UserFactory(username="bob")  # another account's member only
    MembershipFactory(user=stranger, account=other, role="admin")
    UserFactory(username="carol")  # a member of nothing
    second = AccountFactory(name="acme-labs")
    MembershipFactory(user=admin, account=second, role="admin")
    return {"own": own, "second": second, "admin": admin, "colleague": colleague}


def test_the_admin_offers_only_members_of_the_accounts_one_administers(
    people: dict[str, Any], client: Client
) -> None:
    client.force_login(people["admin"])

    page = client.get(reverse("admin:cloud_membership_add"))

    assert page.status_code == 200
    offered = {user.username for user in page.context["adminform"].form.fields["user"].queryset}
    assert offered == {"acme-admin", "alice"}
    assert "bob" not in page.content.decode() and "carol" not in page.content.decode()


def test_a_superuser_is_offered_every_user(people: dict[str, Any], admin_client: Client) -> None:
    page = admin_client.get(reverse("admin:cloud_membership_add"))

    offered = {user.username for user in page.context["adminform"].form.fields["user"].queryset}
    assert {"acme-admin", "alice", "bob", "carol"} <= offered


def test_an_unknown_user_name_and_one_the_caller_may_not_know_answer_the_same(
    people: dict[str, Any],
) -> None:
    api = APIClient()
    api.force_authenticate(people["admin"])

    def given(username: str) -> tuple[int, Any]:
        response = api.post(
            "/api/v1/memberships/",
            {"user": username, "account": people["own"].pk, "role": "viewer"},
            format="json",
        )
        return response.status_code, str(response.json()).replace(username, "NAME")

    answers = {name: given(name) for name in ("bob", "carol", "nobody-has-this-name")}

    assert len(set(answers.values())) == 1, answers
    assert answers["bob"][0] == 409
    assert not Membership.objects.filter(account=people["own"], user__username="bob").exists()
    # A member of an account one administers can be given a role in another of them.
    assert given("alice")[0] == 409  # already a member of acme: a conflict of its own
    moved = api.post(
        "/api/v1/memberships/",
        {"user": "alice", "account": people["second"].pk, "role": "viewer"},
        format="json",
    )
    assert moved.status_code == 201, moved.json()


def test_the_admin_answers_the_same_for_an_unknown_user_and_one_not_known(
    people: dict[str, Any], client: Client
) -> None:
    client.force_login(people["admin"])
    stranger = User.objects.get(username="bob")
    missing = User.objects.order_by("-pk").first()
    assert missing is not None

    def errors(user_id: int) -> Any:
        page = client.post(
            reverse("admin:cloud_membership_add"),
            {
                "user": user_id,
                "account": people["own"].pk,
                "role": Group.objects.get(name="viewer").pk,
            },
        )
        assert page.status_code == 200  # the form again
        return page.context["adminform"].form.errors

    assert errors(stranger.pk) == errors(missing.pk + 1000)
    assert not Membership.objects.filter(user=stranger, account=people["own"]).exists()
