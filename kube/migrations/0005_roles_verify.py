"""Operators (and admins) may ask for a node's GPUs to be verified again (see
ROLE_PERMISSIONS in capvco_web/permissions.py)."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

ADDED = {"operator": ["verify_kubenode"], "admin": ["verify_kubenode"]}


def roles_verify(apps: Any, schema_editor: Any) -> None:
    kube = apps.get_app_config("kube")
    kube.models_module = True
    create_permissions(kube, apps=apps, verbosity=0)
    kube.models_module = None
    permission_model = apps.get_model("auth", "Permission")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=list(ADDED)):
        group.permissions.add(
            *permission_model.objects.filter(
                content_type__app_label="kube", codename__in=ADDED[group.name]
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0009_plan_passes"),
        ("kube", "0004_gpu_verification"),
    ]

    operations = [migrations.RunPython(roles_verify, migrations.RunPython.noop)]
