"""The three roles of a membership, as groups with their permissions (see
capvco_web/permissions.py, whose ROLE_PERMISSIONS a test keeps equal to this list)."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLES = {
    "viewer": [
        "clusters.view_account",
        "clusters.view_cluster",
        "clusters.view_clustersite",
        "clusters.view_location",
        "clusters.view_machine",
        "clusters.view_machinepool",
        "clusters.view_membership",
        "clusters.view_virtualmachine",
        "gpus.view_gpuprofile",
        "gpus.view_vgpureservation",
    ],
    "operator": [
        "clusters.delete_cluster",
        "clusters.delete_machine",
        "clusters.force_delete_machine",
        "clusters.scale_machinepool",
        "clusters.view_account",
        "clusters.view_cluster",
        "clusters.view_clustersite",
        "clusters.view_location",
        "clusters.view_machine",
        "clusters.view_machinepool",
        "clusters.view_membership",
        "clusters.view_virtualmachine",
        "gpus.release_vgpureservation",
        "gpus.view_gpuprofile",
        "gpus.view_vgpureservation",
    ],
    "admin": [
        "clusters.add_cluster",
        "clusters.add_clustersite",
        "clusters.add_machinepool",
        "clusters.add_membership",
        "clusters.change_account",
        "clusters.change_cluster",
        "clusters.change_clustersite",
        "clusters.change_machinepool",
        "clusters.change_membership",
        "clusters.delete_account",
        "clusters.delete_cluster",
        "clusters.delete_clustersite",
        "clusters.delete_machine",
        "clusters.delete_machinepool",
        "clusters.delete_membership",
        "clusters.force_delete_machine",
        "clusters.scale_machinepool",
        "clusters.view_account",
        "clusters.view_cluster",
        "clusters.view_clustersite",
        "clusters.view_location",
        "clusters.view_machine",
        "clusters.view_machinepool",
        "clusters.view_membership",
        "clusters.view_virtualmachine",
        "gpus.release_vgpureservation",
        "gpus.view_gpuprofile",
        "gpus.view_vgpureservation",
    ],
}


def roles_create(apps: Any, schema_editor: Any) -> None:
    # Permissions are made after `migrate` (post_migrate); the roles need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    for role, perms in ROLES.items():
        group, _ = group_model.objects.get_or_create(name=role)
        group.permissions.set(
            [
                permission_model.objects.get(
                    content_type__app_label=perm.split(".")[0], codename=perm.split(".")[1]
                )
                for perm in perms
            ]
        )


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0002_api_tokens"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("clusters", "0007_memberships_and_role_permissions"),
        ("gpus", "0005_release_permission"),
    ]

    operations = [migrations.RunPython(roles_create, migrations.RunPython.noop)]
