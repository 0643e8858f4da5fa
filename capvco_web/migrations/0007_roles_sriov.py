"""SR-IOV: every role reads the NICs, networks and configuration of its accounts' clusters;
operators also detach leaked NICs; admins also enable SR-IOV (see ROLE_PERMISSIONS in
capvco_web/permissions.py)."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEW = ["view_externalnetwork", "view_sriovconfig", "view_podnic", "view_leakednic"]
ADDED = {
    "viewer": VIEW,
    "operator": [*VIEW, "detach_leakednic"],
    "admin": [*VIEW, "detach_leakednic", "change_sriovconfig"],
}


def roles_sriov(apps: Any, schema_editor: Any) -> None:
    sriov = apps.get_app_config("sriov")
    sriov.models_module = True
    create_permissions(sriov, apps=apps, verbosity=0)
    sriov.models_module = None
    permission_model = apps.get_model("auth", "Permission")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=list(ADDED)):
        group.permissions.add(
            *permission_model.objects.filter(
                content_type__app_label="sriov", codename__in=ADDED[group.name]
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0006_audit_events_by_account"),
        ("sriov", "0002_sriov_per_pod"),
    ]

    operations = [migrations.RunPython(roles_sriov, migrations.RunPython.noop)]
