"""The admin shows a user the rows of their accounts only, offers only those in its forms
and filters, and lets their role there decide what they may change or do."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from capvco_web.models import AuditEvent
from cloud.models import Account, Location, Membership
from clusters.models import Cluster, Machine, MachinePool
from tests.access.conftest import World, caller_make, newcomer_known_to_admins_of
from tests.factories import ClusterSiteFactory, LocationFactory, MembershipFactory

pytestmark = pytest.mark.django_db

# Each admin changelist, and the rows of a tenant it lists.
CHANGELISTS = {
    "cloud_account": lambda t: {t.account.pk},
    "cloud_location": lambda t: {t.location.pk, t.spare_location.pk, t.empty_site.location_id},
    "clusters_cluster": lambda t: {t.cluster.pk},
    "clusters_clustersite": lambda t: {t.site.pk, t.empty_site.pk},
    "clusters_machinepool": lambda t: {t.pool.pk, t.empty_pool.pk},
    "clusters_machine": lambda t: {t.machine.pk},
    "cloud_membership": lambda t: {t.membership.pk},
    "gpus_gpuprofile": lambda t: {t.card.pk},
    "gpus_vgpureservation": lambda t: {t.reservation.pk},
}


def signed_in(caller: str, world: World) -> Client:
    client = Client()
    client.force_login(caller_make(caller, world))
    return client


def change_url(obj: Any) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def action_post(client: Client, changelist: str, action: str, pks: list[int], **data: Any) -> Any:
    return client.post(
        reverse(f"admin:{changelist}_changelist"),
        {"action": action, ACTION_CHECKBOX_NAME: pks, **data},
        follow=True,
    )


@pytest.mark.parametrize("changelist", list(CHANGELISTS))
def test_viewer_sees_only_their_accounts_rows_in_every_changelist(
    world: World, changelist: str
) -> None:
    viewer = signed_in("viewer", world)

    response = viewer.get(reverse(f"admin:{changelist}_changelist"))

    assert response.status_code == 200
    shown = {row.pk for row in response.context["cl"].result_list}
    own = CHANGELISTS[changelist](world.own)
    if changelist == "cloud_membership":
        own |= set(
            Membership.objects.filter(account=world.own.account).values_list("pk", flat=True)
        )
    assert shown == own


@pytest.mark.parametrize("changelist", ["clusters_cluster", "clusters_clustersite"])
def test_list_filters_offer_only_the_callers_accounts_objects(
    world: World, changelist: str
) -> None:
    user = caller_make("viewer", world)
    # A second account of theirs: a filter shows once it has two choices.
    second = ClusterSiteFactory(cluster__account=MembershipFactory(user=user).account)
    client = Client()
    client.force_login(user)

    response = client.get(reverse(f"admin:{changelist}_changelist"))

    offered = {
        str(choice[1])
        for spec in response.context["cl"].filter_specs
        for choice in getattr(spec, "lookup_choices", [])
    }
    if changelist == "clusters_cluster":
        assert offered == {str(world.own.account), str(second.cluster.account)}
    else:
        assert offered == {
            str(world.own.location),
            str(world.own.empty_site.location),
            str(second.location),
        }


def test_viewer_cannot_change_their_accounts_rows_nor_open_another_accounts(
    world: World,
) -> None:
    viewer = signed_in("viewer", world)
    own, other = world.own.pool, world.other.pool

    page = viewer.get(change_url(own))
    posted = viewer.post(change_url(own), {"replicas": 9})
    elsewhere = viewer.get(change_url(other))

    assert page.status_code == 200
    assert not page.context["has_change_permission"]
    assert posted.status_code == 403
    assert MachinePool.objects.get(pk=own.pk).replicas == own.replicas
    # Another account's row "does not exist": the admin sends the user back home.
    assert elsewhere.status_code == 302
    assert elsewhere["Location"] == reverse("admin:index")
    assert viewer.get(reverse("admin:clusters_cluster_add")).status_code == 403


def test_a_user_of_no_account_sees_nothing_in_the_admin(world: World) -> None:
    response = signed_in("none", world).get(reverse("admin:index"))
    assert response.status_code == 200
    assert response.context["app_list"] == []


def test_admin_add_form_offers_only_the_accounts_where_the_role_may_add(world: World) -> None:
    admin = signed_in("admin", world)

    form = admin.get(reverse("admin:clusters_cluster_add")).context["adminform"].form
    offered = set(form.fields["account"].queryset.values_list("pk", flat=True))
    refused = admin.post(
        reverse("admin:clusters_cluster_add"),
        {**inline_management(), "name": "theirs", "account": world.other.account.pk},
    )
    created = admin.post(
        reverse("admin:clusters_cluster_add"),
        {**inline_management(), "name": "ours", "account": world.own.account.pk},
    )

    assert offered == {world.own.account.pk}
    assert refused.status_code == 200  # the form again, with the error on the field
    assert "account" in refused.context["adminform"].form.errors
    assert created.status_code == 302
    assert Cluster.objects.filter(name="ours").exists()
    assert not Cluster.objects.filter(name="theirs").exists()
    event = AuditEvent.objects.get(action="cluster.create")
    assert event.after == {"name": "ours", "account": str(world.own.account), "state": "active",
                           "kubeconfig": "", "gpu_addon": False}  # fmt: skip


def inline_management() -> dict[str, str]:
    return {
        f"{prefix}-{key}": value
        for prefix in ("sites", "pools")
        for key, value in {"TOTAL_FORMS": "0", "INITIAL_FORMS": "0"}.items()
    }


def test_operator_force_deletes_their_machine_and_nothing_of_another_account(
    world: World,
) -> None:
    operator = signed_in("operator", world)
    own, other = world.own.machine, world.other.machine

    action_post(
        operator, "clusters_machine", "force_delete_selected", [own.pk, other.pk],
        confirm="yes", reason="VM lost", names=f"{own.name} {other.name}",
    )  # fmt: skip

    assert not Machine.objects.filter(pk=own.pk).exists()
    assert Machine.objects.filter(pk=other.pk).exists()
    assert list(AuditEvent.objects.values_list("action", "object_id")) == [
        ("machine.force_delete", str(own.pk))
    ]


def test_viewer_is_offered_no_action_and_an_action_posted_does_nothing(world: World) -> None:
    viewer = signed_in("viewer", world)
    own = world.own.machine

    page = viewer.get(reverse("admin:clusters_machine_changelist"))
    action_post(
        viewer, "clusters_machine", "force_delete_selected", [own.pk],
        confirm="yes", reason="VM lost",
    )  # fmt: skip

    assert page.context["action_form"] is None or not page.context["cl"].show_admin_actions
    assert Machine.objects.filter(pk=own.pk).exists()
    assert not AuditEvent.objects.exists()


def test_operator_scales_a_pool_with_a_reason_in_the_admin(world: World) -> None:
    operator = signed_in("operator", world)
    pool = world.own.pool

    asked = action_post(operator, "clusters_machinepool", "scale_selected", [pool.pk])
    done = action_post(
        operator, "clusters_machinepool", "scale_selected", [pool.pk],
        confirm="yes", replicas=4, reason="more load",
    )  # fmt: skip

    assert b"Scale selected pools" in asked.content
    assert done.status_code == 200
    assert MachinePool.objects.get(pk=pool.pk).replicas == 4
    event = AuditEvent.objects.get(action="pool.scale")
    assert (event.before, event.after, event.reason) == (
        {"replicas": 1},
        {"replicas": 4},
        "more load",
    )


def test_operator_cannot_edit_a_pools_placement_in_the_admin(world: World) -> None:
    operator = signed_in("operator", world)
    response = operator.post(change_url(world.own.pool), {"replicas": 4})
    assert response.status_code == 403


def test_account_admin_manages_members_of_their_account_only(world: World) -> None:
    admin = signed_in("admin", world)
    newcomer = newcomer_known_to_admins_of(world.own.account, "newcomer")
    add = reverse("admin:cloud_membership_add")
    roles = {g.name: g.pk for g in Membership._meta.get_field("role").related_model.objects.all()}

    form = admin.get(add).context["adminform"].form
    refused = admin.post(
        add, {"user": newcomer.pk, "account": world.other.account.pk, "role": roles["admin"]}
    )
    added = admin.post(
        add, {"user": newcomer.pk, "account": world.own.account.pk, "role": roles["operator"]}
    )

    offered = set(form.fields["account"].queryset.values_list("pk", flat=True))
    assert world.own.account.pk in offered and world.other.account.pk not in offered
    assert set(form.fields["user"].queryset) == set(
        User.objects.filter(memberships__account__in=offered)
    )
    assert set(form.fields["role"].queryset.values_list("name", flat=True)) == {
        "viewer", "operator", "admin"
    }  # fmt: skip
    assert refused.status_code == 200 and "account" in refused.context["adminform"].form.errors
    assert added.status_code == 302
    membership = Membership.objects.get(user=newcomer, account=world.own.account)
    assert (membership.account, membership.role.name) == (world.own.account, "operator")
    event = AuditEvent.objects.get(action="membership.create")
    assert event.after == {
        "user": "newcomer", "account": str(world.own.account), "role": "operator"
    }  # fmt: skip


def test_only_a_tenants_admin_sees_the_add_and_delete_of_its_rows(world: World) -> None:
    for caller, may in [("viewer", False), ("operator", False), ("admin", True)]:
        client = signed_in(caller, world)
        page = client.get(reverse("admin:clusters_clustersite_changelist"))
        assert page.context["has_add_permission"] is may, caller


def test_account_admin_deletes_an_empty_account_with_its_locations_and_members(
    world: World,
) -> None:
    user = caller_make("none", world)
    membership = MembershipFactory(user=user, role="admin")
    empty = membership.account
    location = LocationFactory(account=empty)
    client = Client()
    client.force_login(user)
    url = reverse("admin:cloud_account_delete", args=[empty.pk])

    asked = client.get(url)
    done = client.post(url, {"post": "yes"})

    assert asked.status_code == 200 and not asked.context["perms_lacking"]
    assert done.status_code == 302
    assert not Account.objects.filter(pk=empty.pk).exists()
    assert not Location.objects.filter(pk=location.pk).exists()
    assert [e.action for e in AuditEvent.objects.all()] == ["account.delete"]
