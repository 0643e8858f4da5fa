"""What the listings show of a vGPU moves to a row of observe's own, ListedVgpu: when it
was first listed, unassigned since, orphaned since and over how many listings. The values
the reservation rows held are copied over before their columns go."""

import django.db.models.deletion
from django.db import migrations, models


def listed_copy(apps, schema_editor):
    reservations = apps.get_model("gpus", "VgpuReservation")
    listed = apps.get_model("gpus", "ListedVgpu")
    rows = (
        reservations.objects.filter(vgpu_id__isnull=False)
        .exclude(state="released")
        .order_by("pk")
        .iterator(chunk_size=2000)
    )
    batch = []
    for row in rows:
        batch.append(
            listed(
                location_id=row.location_id,
                vgpu_id=row.vgpu_id,
                name=row.name,
                gpu_id=row.gpu_id,
                vm_id=row.vm_id,
                first_seen_at=row.first_seen_at or row.created_at,
                unassigned_since=row.unassigned_since,
                orphaned_since=row.orphaned_since,
                orphan_confirmations=row.orphan_confirmations,
            )
        )
        if len(batch) == 2000:
            listed.objects.bulk_create(batch)
            batch = []
    listed.objects.bulk_create(batch)


class Migration(migrations.Migration):

    dependencies = [
        ('cloud', '0003_vm_sizes_prices_and_removal_permission'),
        ('gpus', '0007_locations_in_cloud'),
    ]

    operations = [
        migrations.CreateModel(
            name='ListedVgpu',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('vgpu_id', models.CharField(max_length=100)),
                ('name', models.CharField(max_length=200)),
                ('gpu_id', models.CharField(blank=True, help_text='The profile (card) id', max_length=100)),
                ('vm_id', models.BigIntegerField(blank=True, null=True)),
                ('first_seen_at', models.DateTimeField(help_text='When a listing first showed it')),
                ('unassigned_since', models.DateTimeField(blank=True, help_text='Since when the listings show it attached to no VM', null=True)),
                ('orphaned_since', models.DateTimeField(blank=True, help_text='Since when complete listings show it owned by no machine', null=True)),
                ('orphan_confirmations', models.PositiveSmallIntegerField(default=0, help_text='Consecutive complete listings that showed it orphaned')),
                ('location', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='listed_vgpus', to='cloud.location')),
            ],
        ),
        migrations.AddField(
            model_name='vgpureservation',
            name='listed',
            field=models.ForeignObject(from_fields=['location', 'vgpu_id'], null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='reservations', to='gpus.listedvgpu', to_fields=['location', 'vgpu_id']),
        ),
        migrations.AddIndex(
            model_name='listedvgpu',
            index=models.Index(condition=models.Q(('orphaned_since__isnull', False)), fields=['location', 'orphaned_since'], name='listed_vgpu_orphaned'),
        ),
        migrations.AddConstraint(
            model_name='listedvgpu',
            constraint=models.UniqueConstraint(fields=('location', 'vgpu_id'), name='listed_vgpu_unique_per_location'),
        ),
        migrations.RunPython(listed_copy, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name='vgpureservation',
            name='first_seen_at',
        ),
        migrations.RemoveField(
            model_name='vgpureservation',
            name='orphan_confirmations',
        ),
        migrations.RemoveField(
            model_name='vgpureservation',
            name='orphaned_since',
        ),
        migrations.RemoveField(
            model_name='vgpureservation',
            name='unassigned_since',
        ),
    ]
