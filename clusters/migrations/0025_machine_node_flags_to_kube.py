"""A machine's node flags (joined, missing, why) are written by the Kubernetes observer:
they live in kube's MachineNode now (kube/migrations/0002_machine_node, which copies them
first), so that observe never moves the machine's `updated_at`, act's compare-and-set
token."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0024_kubernetes_mirror_to_kube"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="machine", name="machine_node_missing"),
        migrations.RemoveField(model_name="machine", name="node_joined_at"),
        migrations.RemoveField(model_name="machine", name="node_missing"),
        migrations.RemoveField(model_name="machine", name="node_missing_reason"),
    ]
