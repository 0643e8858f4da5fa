"""Locations are `cloud`'s now (state only: the column and its foreign key stay)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('cloud', '0001_initial'),
        ('gpus', '0006_dashboard_indexes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='gpuprofile',
                    name='location',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='gpu_profiles', to='cloud.location'),
                ),
                migrations.AlterField(
                    model_name='vgpureservation',
                    name='location',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='reservations', to='cloud.location'),
                ),
            ],
        ),
    ]
