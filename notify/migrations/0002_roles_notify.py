"""Notifications: account admins see, add, change and delete webhook targets and see the
notices sent (see ROLE_PERMISSIONS in capvco_web/permissions.py); viewers and operators
nothing of them."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

ADDED = {
    "admin": [
        "view_webhooktarget",
        "add_webhooktarget",
        "change_webhooktarget",
        "delete_webhooktarget",
        "view_notice",
    ],
}


def roles_notify(apps: Any, schema_editor: Any) -> None:
    notify = apps.get_app_config("notify")
    notify.models_module = True
    create_permissions(notify, apps=apps, verbosity=0)
    notify.models_module = None
    permission_model = apps.get_model("auth", "Permission")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=list(ADDED)):
        group.permissions.add(
            *permission_model.objects.filter(
                content_type__app_label="notify", codename__in=ADDED[group.name]
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0008_accounts_in_cloud"),
        ("notify", "0001_webhook_targets_and_notices"),
    ]

    operations = [migrations.RunPython(roles_notify, migrations.RunPython.noop)]
