"""The Kubernetes mirror (KubeNode, KubePod, KubeWatch) belongs to the kube app now
(kube/migrations/0001_initial.py): the models leave this app's state only; their tables,
rows and names stay as they are."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0023_machine_capacity_wait_and_stuck"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="kubepod", name="cluster"),
                migrations.RemoveField(model_name="kubewatch", name="cluster"),
                migrations.DeleteModel(name="KubeNode"),
                migrations.DeleteModel(name="KubePod"),
                migrations.DeleteModel(name="KubeWatch"),
            ],
            database_operations=[],
        )
    ]
