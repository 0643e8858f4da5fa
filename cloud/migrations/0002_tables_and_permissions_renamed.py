"""The moved models take this app's table names (cloud_account, ...), and their content
types and permissions this app's label: the same rows renamed, so that the roles' groups
and users' permissions keep them. Audit events name the models by their new labels."""

from typing import Any

from django.db import migrations

MODELS = ["account", "membership", "location", "cloudspace", "image", "virtualmachine"]
LABELS = {
    "account": "Account",
    "membership": "Membership",
    "location": "Location",
    "cloudspace": "Cloudspace",
    "image": "Image",
    "virtualmachine": "VirtualMachine",
}


def _relabel(apps: Any, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    AuditEvent = apps.get_model("capvco_web", "AuditEvent")
    for model in MODELS:
        # One made under the new label before this ran (post_migrate of a partial migrate)
        # holds no grant worth more than the old one's: it gives way.
        if ContentType.objects.filter(app_label=old, model=model).exists():
            ContentType.objects.filter(app_label=new, model=model).delete()
        ContentType.objects.filter(app_label=old, model=model).update(app_label=new)
        AuditEvent.objects.filter(object_type=f"{old}.{LABELS[model]}").update(
            object_type=f"{new}.{LABELS[model]}"
        )


def forwards(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, "clusters", "cloud")


def backwards(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, "cloud", "clusters")


class Migration(migrations.Migration):
    dependencies = [
        ("cloud", "0001_initial"),
        ("clusters", "0013_accounts_and_locations_in_cloud"),
        ("capvco_web", "0008_accounts_in_cloud"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        *(migrations.AlterModelTable(name=model, table=None) for model in MODELS),
        migrations.RenameIndex(
            model_name="virtualmachine",
            new_name="cloud_virtu_locatio_1918e3_idx",
            old_name="clusters_vi_locatio_bde637_idx",
        ),
        migrations.RunPython(forwards, backwards),
    ]
