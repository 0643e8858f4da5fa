"""Every role reads the Kubernetes nodes and pods of its accounts' clusters (see
ROLE_PERMISSIONS in capvco_web/permissions.py)."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

ADDED = ["view_kubenode", "view_kubepod"]


def roles_see_kubernetes(apps: Any, schema_editor: Any) -> None:
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
        ("capvco_web", "0003_roles"),
        ("clusters", "0008_kubernetes_nodes_and_pods"),
    ]

    operations = [migrations.RunPython(roles_see_kubernetes, migrations.RunPython.noop)]
