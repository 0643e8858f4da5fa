"""Money history: every role of an account sees its cost and capacity history, its leaks
and the checks of its bill (see ROLE_PERMISSIONS in capvco_web/permissions.py)."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

SEEN = ["view_costrollup", "view_capacityrollup", "view_leak", "view_billcheck", "view_billitem"]
ADDED = {"viewer": SEEN, "operator": SEEN, "admin": SEEN}


def roles_billing(apps: Any, schema_editor: Any) -> None:
    billing = apps.get_app_config("billing")
    billing.models_module = True
    create_permissions(billing, apps=apps, verbosity=0)
    billing.models_module = None
    permission_model = apps.get_model("auth", "Permission")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=list(ADDED)):
        group.permissions.add(
            *permission_model.objects.filter(
                content_type__app_label="billing", codename__in=ADDED[group.name]
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0008_accounts_in_cloud"),
        ("billing", "0001_money_history"),
    ]

    operations = [migrations.RunPython(roles_billing, migrations.RunPython.noop)]
