"""What an orphan VM costs (its size, the location's unit prices), and who may remove one:
operators and admins (see ROLE_PERMISSIONS in capvco_web/permissions.py)."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations, models

ROLES = ["operator", "admin"]


def roles_remove_vms(apps: Any, schema_editor: Any) -> None:
    cloud = apps.get_app_config("cloud")
    cloud.models_module = True
    create_permissions(cloud, apps=apps, verbosity=0)
    cloud.models_module = None
    permission = apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label="cloud", codename="remove_virtualmachine"
    )
    for group in apps.get_model("auth", "Group").objects.filter(name__in=ROLES):
        group.permissions.add(*permission)


class Migration(migrations.Migration):
    dependencies = [
        ("cloud", "0002_tables_and_permissions_renamed"),
        ("capvco_web", "0008_accounts_in_cloud"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="virtualmachine",
            options={
                "permissions": [("remove_virtualmachine", "Can remove a VM that no machine owns")]
            },
        ),
        migrations.AddField(
            model_name="location",
            name="prices",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="The account's monthly price per unit here, as whitesky lists them (vcu: a vCPU, mu: a GiB of memory, su: a TB of disk, vgu: a vGPU, ...)",
            ),
        ),
        migrations.AddField(
            model_name="virtualmachine",
            name="memory_mib",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="virtualmachine",
            name="vcpus",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(roles_remove_vms, migrations.RunPython.noop),
    ]
