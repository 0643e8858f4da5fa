"""Act state apart from what people ask for: a cluster's deletion blockers (act's) move to
ClusterStatus; a person's request to delete a machine gets a row of its own
(MachineDeletion, services'), and Machine.delete_requested stays act's mark that the
teardown is taken up. Rows are copied both ways."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MACHINE = "clusters.Machine"


def forward(apps, schema_editor):
    Cluster = apps.get_model("clusters", "Cluster")
    ClusterStatus = apps.get_model("clusters", "ClusterStatus")
    Machine = apps.get_model("clusters", "Machine")
    MachineDeletion = apps.get_model("clusters", "MachineDeletion")
    AuditEvent = apps.get_model("capvco_web", "AuditEvent")
    ClusterStatus.objects.bulk_create(
        ClusterStatus(cluster_id=pk, deletion_blockers=blockers)
        for pk, blockers in Cluster.objects.exclude(deletion_blockers=[]).values_list(
            "pk", "deletion_blockers"
        )
    )
    deletions = []
    for machine in Machine.objects.filter(delete_requested=True).iterator():
        # Who asked, and why, as the audit recorded it (act's marks have no user).
        asked = (
            AuditEvent.objects.filter(
                object_type=MACHINE, object_id=str(machine.pk), action="machine.delete_requested"
            )
            .order_by("-created_at", "-pk")
            .first()
        )
        deletions.append(
            MachineDeletion(
                machine_id=machine.pk,
                requested_by_id=asked.actor_id if asked else None,
                requested_at=asked.created_at if asked else machine.updated_at,
                reason=asked.reason if asked else "",
            )
        )
    MachineDeletion.objects.bulk_create(deletions)


def backward(apps, schema_editor):
    Cluster = apps.get_model("clusters", "Cluster")
    ClusterStatus = apps.get_model("clusters", "ClusterStatus")
    Machine = apps.get_model("clusters", "Machine")
    MachineDeletion = apps.get_model("clusters", "MachineDeletion")
    for status in ClusterStatus.objects.all():
        Cluster.objects.filter(pk=status.cluster_id).update(
            deletion_blockers=status.deletion_blockers
        )
    Machine.objects.filter(
        pk__in=MachineDeletion.objects.values_list("machine_id", flat=True)
    ).update(delete_requested=True)


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0008_accounts_in_cloud"),
        ("clusters", "0026_observed_cluster_state_to_kube"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ClusterStatus",
            fields=[
                (
                    "cluster",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="status",
                        serialize=False,
                        to="clusters.cluster",
                    ),
                ),
                (
                    "deletion_blockers",
                    models.JSONField(
                        blank=True, default=list, help_text="While deleting: what still exists."
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={"verbose_name_plural": "cluster statuses"},
        ),
        migrations.CreateModel(
            name="MachineDeletion",
            fields=[
                (
                    "machine",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="deletion",
                        serialize=False,
                        to="clusters.machine",
                    ),
                ),
                ("requested_at", models.DateTimeField()),
                ("reason", models.TextField(blank=True)),
                (
                    "requested_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.AlterField(
            model_name="machine",
            name="delete_requested",
            field=models.BooleanField(
                default=False,
                help_text="Its teardown is taken up: set by act when it carries out the plan's "
                "teardown or replacement (a person's request is a MachineDeletion)",
            ),
        ),
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="cluster", name="deletion_blockers"),
    ]
