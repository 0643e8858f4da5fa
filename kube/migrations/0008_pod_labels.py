from django.db import migrations, models


def compare_pods_afresh(apps, schema_editor):
    # The pods were mirrored without their labels: a listing whose resourceVersion is the
    # one last mirrored would not be compared, and a quiet cluster's pods would keep none.
    apps.get_model("kube", "ClusterObservation").objects.update(pods_resource_version="")


class Migration(migrations.Migration):

    dependencies = [
        ('kube', '0007_gpu_use'),
    ]

    operations = [
        migrations.AddField(
            model_name='kubepod',
            name='labels',
            field=models.JSONField(blank=True, default=dict, help_text='Its labels (not its annotations): cost by label'),
        ),
        migrations.RunPython(compare_pods_afresh, migrations.RunPython.noop),
    ]
