"""Locations are `cloud`'s now (state only: the columns and their foreign keys stay)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('cloud', '0001_initial'),
        ('sriov', '0004_podnic_attachment_key'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='externalnetwork',
                    name='location',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='external_networks', to='cloud.location'),
                ),
                migrations.AlterField(
                    model_name='leakednic',
                    name='location',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='leaked_nics', to='cloud.location'),
                ),
                migrations.AlterField(
                    model_name='podnic',
                    name='location',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='pod_nics', to='cloud.location'),
                ),
            ],
        ),
    ]
