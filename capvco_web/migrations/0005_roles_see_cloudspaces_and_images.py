"""Every role reads the cloudspaces and images of its accounts' locations (see
ROLE_PERMISSIONS in capvco_web/permissions.py)."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

ADDED = ["view_cloudspace", "view_image"]


def roles_see_catalog(apps: Any, schema_editor: Any) -> None:
    clusters = apps.get_app_config("clusters")
    clusters.models_module = True
    create_permissions(clusters, apps=apps, verbosity=0)
    clusters.models_module = None
    permission_model = apps.get_model("auth", "Permission")
    added = permission_model.objects.filter(content_type__app_label="clusters", codename__in=ADDED)
    for group in apps.get_model("auth", "Group").objects.filter(
        name__in=["viewer", "operator", "admin"]
    ):
        group.permissions.add(*added)


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0004_roles_see_kubernetes"),
        ("clusters", "0009_cloudspaces_and_images"),
    ]

    operations = [migrations.RunPython(roles_see_catalog, migrations.RunPython.noop)]
