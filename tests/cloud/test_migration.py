"""Moving accounts, memberships, locations, cloudspaces, images and VMs from `clusters` to
`cloud` keeps every row, its id, the foreign keys to it and the permissions granted on
it: a database with rows of the old schema is migrated forward on PostgreSQL.

(codemod: skip: this file names the old labels on purpose.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from capvco_web.models import AuditEvent
from cloud.models import Account, Cloudspace, Image, Location, Membership, VirtualMachine
from clusters.models import Cluster, ClusterSite
from gpus.models import GpuProfile
from tests.factories import JWT

# The last migrations before the move, of each app that had a foreign key to a moved model.
BEFORE = [
    ("clusters", "0012_cluster_names_unique_per_whitesky_customer"),
    ("gpus", "0006_dashboard_indexes"),
    ("sriov", "0004_podnic_attachment_key"),
    ("capvco_web", "0007_roles_sriov"),
]


def _tables() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


def _old_rows(apps: Any) -> dict[str, Any]:
    get = apps.get_model
    account = get("clusters", "Account").objects.create(
        name="old", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c-1", credential=JWT,
    )  # fmt: skip
    location = get("clusters", "Location").objects.create(account=account, name="nl-1")
    user = get("auth", "User").objects.create(username="migrated")
    old_perm = get("auth", "Permission").objects.get
    view_account = old_perm(content_type__app_label="clusters", codename="view_account")
    add_account = old_perm(content_type__app_label="clusters", codename="add_account")
    group = get("auth", "Group").objects.create(name="migrated-role")
    group.permissions.add(view_account)
    user.user_permissions.add(add_account)
    membership = get("clusters", "Membership").objects.create(
        user=user, account=account, role=group
    )
    cluster = get("clusters", "Cluster").objects.create(name="c", account=account)
    site = get("clusters", "ClusterSite").objects.create(
        cluster=cluster, location=location, cloudspace_id="cs-1", image_id=7
    )
    return {
        "account": account.pk,
        "location": location.pk,
        "user": user.pk,
        "group": group.pk,
        "membership": membership.pk,
        "cluster": cluster.pk,
        "site": site.pk,
        "cloudspace": get("clusters", "Cloudspace")
        .objects.create(location=location, cloudspace_id="cs-1", name="cs", status="DEPLOYED")
        .pk,
        "image": get("clusters", "Image")
        .objects.create(location=location, image_id=7, name="ubuntu", status="CREATED")
        .pk,
        "vm": get("clusters", "VirtualMachine")
        .objects.create(
            location=location, cloudspace_id="cs-1", vm_id=42, name="vm", status="RUNNING"
        )
        .pk,
        "card": get("gpus", "GpuProfile")
        .objects.create(location=location, profile_id="p-1", vendor="NVIDIA", model="A100")
        .pk,
        "event": get("capvco_web", "AuditEvent")
        .objects.create(
            account=account,
            actor_name="alice",
            action="account.change",
            object_type="clusters.Account",
            object_id=str(account.pk),
            object_repr="old",
        )
        .pk,
    }


@pytest.mark.django_db(transaction=True)
def test_rows_foreign_keys_and_permissions_survive_the_move_to_cloud() -> None:
    assert connection.vendor == "postgresql"
    MigrationExecutor(connection).migrate([("cloud", None)])  # the schema before the move
    assert {"clusters_account", "clusters_location"} <= _tables()
    assert not {"cloud_account", "cloud_location"} & _tables()
    old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    ids = _old_rows(old)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    tables = _tables()
    moved = {"account", "membership", "location", "cloudspace", "image", "virtualmachine"}
    assert {f"cloud_{name}" for name in moved} <= tables
    assert not {f"clusters_{name}" for name in moved} & tables
    account = Account.objects.get(pk=ids["account"])
    assert (account.name, account.customer_id, account.credential) == ("old", "c-1", JWT)
    location = Location.objects.get(pk=ids["location"])
    assert location.account_id == account.pk
    assert Cluster.objects.get(pk=ids["cluster"]).account_id == account.pk
    assert ClusterSite.objects.get(pk=ids["site"]).location_id == location.pk
    assert GpuProfile.objects.get(pk=ids["card"]).location_id == location.pk
    assert Cloudspace.objects.get(pk=ids["cloudspace"]).location_id == location.pk
    assert Image.objects.get(pk=ids["image"]).location_id == location.pk
    assert VirtualMachine.objects.get(pk=ids["vm"]).location_id == location.pk
    membership = Membership.objects.get(pk=ids["membership"])
    assert (membership.user_id, membership.account_id, membership.role_id) == (
        ids["user"],
        account.pk,
        ids["group"],
    )
    # The same permission rows, under the new label: the grants hold.
    group = Group.objects.get(pk=ids["group"])
    assert [p.content_type.app_label for p in group.permissions.all()] == ["cloud"]
    user = User.objects.get(pk=ids["user"])
    assert user.has_perm("cloud.add_account") and not user.has_perm("clusters.add_account")
    assert not Permission.objects.filter(
        content_type__app_label="clusters", content_type__model="account"
    )
    event = AuditEvent.objects.get(pk=ids["event"])
    assert (event.object_type, event.account_id) == ("cloud.Account", account.pk)
    # New rows take ids after the old ones: the sequences came along with the tables.
    assert Location.objects.create(account=account, name="nl-2").pk > location.pk
