"""Every role of an account sees since when its GPUs are idle."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations


def roles_idle_spells(apps: Any, schema_editor: Any) -> None:
    billing = apps.get_app_config("billing")
    billing.models_module = True
    create_permissions(billing, apps=apps, verbosity=0)
    billing.models_module = None
    seen = apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label="billing", codename="view_idlespell"
    )
    for group in apps.get_model("auth", "Group").objects.filter(
        name__in=["viewer", "operator", "admin"]
    ):
        group.permissions.add(*seen)


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_idle_spells")]

    operations = [migrations.RunPython(roles_idle_spells, migrations.RunPython.noop)]
