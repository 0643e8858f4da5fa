import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cloud", "0003_vm_sizes_prices_and_removal_permission"),
        ("clusters", "0016_kube_pod_gpu_type"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="VmRemovalRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("vm_id", models.BigIntegerField()),
                ("name", models.CharField(max_length=200)),
                ("cloudspace_id", models.CharField(max_length=100)),
                ("requested_at", models.DateTimeField()),
                ("reason", models.TextField()),
                ("attempted_at", models.DateTimeField(blank=True, null=True)),
                (
                    "error",
                    models.TextField(blank=True, help_text="Why the last attempt was refused"),
                ),
                ("done_at", models.DateTimeField(blank=True, null=True)),
                (
                    "location",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="vm_removal_requests",
                        to="cloud.location",
                    ),
                ),
                (
                    "requested_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("done_at__isnull", True)),
                        fields=("location", "vm_id"),
                        name="one_open_vm_removal_per_vm",
                    )
                ],
            },
        ),
    ]
