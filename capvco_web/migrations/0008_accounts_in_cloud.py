"""Accounts are `cloud`'s now (state only: the column stays)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('capvco_web', '0007_roles_sriov'),
        ('cloud', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='auditevent',
                    name='account',
                    field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='cloud.account'),
                ),
            ],
        ),
    ]
