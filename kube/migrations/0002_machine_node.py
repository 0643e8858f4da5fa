"""A machine's node flags move off the machine (clusters/migrations/0025) into a row the
Kubernetes observer alone writes; the flags of every machine are copied before the
machine's fields go, and back when undone."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def flags_to_machine_nodes(apps: Any, schema_editor: Any) -> None:
    machine_model = apps.get_model("clusters", "Machine")
    machine_node = apps.get_model("kube", "MachineNode")
    # A machine whose node was never seen and that is not flagged needs no row.
    seen = machine_model.objects.exclude(node_joined_at=None, node_missing=False)
    machine_node.objects.bulk_create(
        [
            machine_node(
                machine_id=pk,
                vm_id=vm_id,
                joined_at=joined_at,
                missing=missing,
                missing_reason=reason,
            )
            for pk, vm_id, joined_at, missing, reason in seen.values_list(
                "pk", "vm_id", "node_joined_at", "node_missing", "node_missing_reason"
            ).iterator()
        ],
        batch_size=1000,
    )


def flags_to_machines(apps: Any, schema_editor: Any) -> None:
    machine_model = apps.get_model("clusters", "Machine")
    for row in apps.get_model("kube", "MachineNode").objects.iterator():
        machine_model.objects.filter(pk=row.machine_id).update(
            node_joined_at=row.joined_at,
            node_missing=row.missing,
            node_missing_reason=row.missing_reason,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0024_kubernetes_mirror_to_kube"),
        ("kube", "0001_initial"),
    ]
    # The flags are copied while the machine still has them.
    run_before = [("clusters", "0025_machine_node_flags_to_kube")]

    operations = [
        migrations.CreateModel(
            name="MachineNode",
            fields=[
                (
                    "machine",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="node_state",
                        serialize=False,
                        to="clusters.machine",
                    ),
                ),
                (
                    "vm_id",
                    models.BigIntegerField(
                        blank=True,
                        help_text="The VM these are about: a machine given a new VM joins anew.",
                        null=True,
                    ),
                ),
                (
                    "joined_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When a listing first showed its Kubernetes node",
                        null=True,
                    ),
                ),
                (
                    "missing",
                    models.BooleanField(
                        default=False,
                        help_text="No node of the cluster is this machine's, "
                        "NODE_JOIN_TIMEOUT_SECONDS after its VM started (from a complete node "
                        "listing).",
                    ),
                ),
                ("missing_reason", models.CharField(blank=True, max_length=300)),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("missing", True)),
                        fields=["machine"],
                        name="kube_machine_node_missing",
                    )
                ],
            },
        ),
        migrations.RunPython(flags_to_machine_nodes, flags_to_machines),
    ]
