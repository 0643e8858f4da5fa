"""Accounts, memberships, locations, cloudspaces, images and VMs are `cloud`'s now: gone
from this app's state, their tables kept (cloud.0001 took them over)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('capvco_web', '0008_accounts_in_cloud'),
        ('cloud', '0001_initial'),
        ('clusters', '0012_cluster_names_unique_per_whitesky_customer'),
        ('gpus', '0007_locations_in_cloud'),
        ('sriov', '0005_locations_in_cloud'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='cluster',
                    name='account',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='clusters', to='cloud.account'),
                ),
                migrations.RemoveField(
                    model_name='location',
                    name='account',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='account',
                ),
                migrations.RemoveField(
                    model_name='cloudspace',
                    name='location',
                ),
                migrations.RemoveField(
                    model_name='image',
                    name='location',
                ),
                migrations.AlterField(
                    model_name='clustersite',
                    name='location',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='sites', to='cloud.location'),
                ),
                migrations.RemoveField(
                    model_name='virtualmachine',
                    name='location',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='role',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='user',
                ),
                migrations.DeleteModel(
                    name='Account',
                ),
                migrations.DeleteModel(
                    name='Cloudspace',
                ),
                migrations.DeleteModel(
                    name='Image',
                ),
                migrations.DeleteModel(
                    name='Location',
                ),
                migrations.DeleteModel(
                    name='VirtualMachine',
                ),
                migrations.DeleteModel(
                    name='Membership',
                ),
            ],
        ),
    ]
