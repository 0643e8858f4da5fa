"""Audit events carry the account of their object, so that its members see them; the
events written before are given theirs where the object still exists, and every role may
read its accounts' events."""

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models

# The paths as capvco_web/ownership.py had them when this was written.
PATHS = {
    "clusters.Account": "pk",
    "clusters.Membership": "account",
    "clusters.Location": "account",
    "clusters.Cluster": "account",
    "clusters.ClusterSite": "cluster__account",
    "clusters.MachinePool": "cluster__account",
    "clusters.Machine": "pool__cluster__account",
    "clusters.VirtualMachine": "location__account",
    "gpus.GpuProfile": "location__account",
    "gpus.VgpuReservation": "location__account",
}


def accounts_fill(apps: Any, schema_editor: Any) -> None:
    events = apps.get_model("capvco_web", "AuditEvent").objects
    for label, path in PATHS.items():
        model = apps.get_model(*label.split("."))
        ids = events.filter(object_type=label, account__isnull=True).values_list(
            "object_id", flat=True
        )
        pks = {int(i) for i in ids.distinct() if i.isdigit()}
        column = "pk" if path == "pk" else f"{path}_id"
        for pk, account_id in model.objects.filter(pk__in=pks).values_list("pk", column):
            events.filter(object_type=label, object_id=str(pk)).update(account_id=account_id)


def roles_see_audit(apps: Any, schema_editor: Any) -> None:
    app = apps.get_app_config("capvco_web")
    app.models_module = True
    create_permissions(app, apps=apps, verbosity=0)
    app.models_module = None
    permission = apps.get_model("auth", "Permission").objects.get(
        content_type__app_label="capvco_web", codename="view_auditevent"
    )
    for group in apps.get_model("auth", "Group").objects.filter(
        name__in=["viewer", "operator", "admin"]
    ):
        group.permissions.add(permission)


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0005_roles_see_cloudspaces_and_images"),
        ("clusters", "0009_cloudspaces_and_images"),
        ("gpus", "0005_release_permission"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="account",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="clusters.account",
            ),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(
                fields=["account", "-created_at"], name="capvco_web__account_e72568_idx"
            ),
        ),
        migrations.RunPython(accounts_fill, migrations.RunPython.noop),
        migrations.RunPython(roles_see_audit, migrations.RunPython.noop),
    ]
