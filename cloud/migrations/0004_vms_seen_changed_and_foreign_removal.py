"""When a listing first showed a VM and last showed it changed (a removal is decided only
from a complete listing begun after that), and who may remove a VM not named by us:
admins only (see ROLE_PERMISSIONS in capvco_web/permissions.py). Rows there now count as
seen and changed now: the next complete listing may decide on them."""

from typing import Any

import django.utils.timezone
from django.contrib.auth.management import create_permissions
from django.db import migrations, models


def admins_remove_foreign_vms(apps: Any, schema_editor: Any) -> None:
    cloud = apps.get_app_config("cloud")
    cloud.models_module = True
    create_permissions(cloud, apps=apps, verbosity=0)
    cloud.models_module = None
    permission = apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label="cloud", codename="remove_foreign_virtualmachine"
    )
    for group in apps.get_model("auth", "Group").objects.filter(name="admin"):
        group.permissions.add(*permission)


class Migration(migrations.Migration):
    dependencies = [
        ("cloud", "0003_vm_sizes_prices_and_removal_permission"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="virtualmachine",
            options={
                "permissions": [
                    ("remove_virtualmachine", "Can remove a VM that no machine owns"),
                    ("remove_foreign_virtualmachine", "Can remove a VM not named by us"),
                ]
            },
        ),
        migrations.AddField(
            model_name="virtualmachine",
            name="changed_at",
            field=models.DateTimeField(
                default=django.utils.timezone.now,
                help_text="When a listing last showed it changed (name, status, size) or first showed it: only a complete listing begun after this may decide to remove it.",
            ),
        ),
        migrations.AddField(
            model_name="virtualmachine",
            name="first_seen_at",
            field=models.DateTimeField(
                default=django.utils.timezone.now, help_text="When a listing first showed it"
            ),
        ),
        migrations.RunPython(admins_remove_foreign_vms, migrations.RunPython.noop),
    ]
