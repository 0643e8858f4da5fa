"""Since when a NIC's pod is gone moves to a row of its own, GonePod, written by reclaim's
reading of the pod mirror alone; the values the NIC rows held are copied first."""

import django.db.models.deletion
from django.db import migrations, models


def gone_copy(apps, schema_editor):
    nics = apps.get_model("sriov", "PodNic")
    gone = apps.get_model("sriov", "GonePod")
    first: dict = {}
    rows = nics.objects.filter(pod_gone_since__isnull=False).exclude(state="released")
    for cluster_id, pod_uid, since in rows.values_list("cluster_id", "pod_uid", "pod_gone_since"):
        key = (cluster_id, pod_uid)
        first[key] = min(since, first.get(key, since))
    gone.objects.bulk_create(
        [gone(cluster_id=c, pod_uid=uid, since=since) for (c, uid), since in first.items()],
        batch_size=2000,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('sriov', '0006_podnic_queue'),
    ]

    operations = [
        migrations.CreateModel(
            name='GonePod',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('pod_uid', models.CharField(max_length=64)),
                ('since', models.DateTimeField()),
                ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='gone_pods', to='clusters.cluster')),
            ],
        ),
        migrations.AddField(
            model_name='podnic',
            name='gone',
            field=models.ForeignObject(from_fields=['cluster', 'pod_uid'], null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='nics', to='sriov.gonepod', to_fields=['cluster', 'pod_uid']),
        ),
        migrations.AddConstraint(
            model_name='gonepod',
            constraint=models.UniqueConstraint(fields=('cluster', 'pod_uid'), name='gone_pod_unique'),
        ),
        migrations.RunPython(gone_copy, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name='podnic',
            name='pod_gone_since',
        ),
    ]
