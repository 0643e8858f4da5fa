"""Accounts, memberships, locations, cloudspaces, images and VMs move from `clusters` to
`cloud`: in Django's state only, on the tables they have (renamed in 0002). Their rows,
ids and the foreign keys to them stay as they are."""

import capvco_web.encryption
import capvco_web.validators
import cloud.models
import datetime
import django.core.validators
import django.db.models.deletion
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('clusters', '0012_cluster_names_unique_per_whitesky_customer'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Account',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, unique=True, validators=[capvco_web.validators.VisibleText()])),
                        ('api_url', models.URLField(help_text='The VCO API base, e.g. https://vco.example/api/1; its host must be in WHITESKY_ALLOWED_HOSTS.', validators=[cloud.models.WhiteskyUrl()])),
                        ('iam_url', models.URLField(help_text='The IAM host that refreshes the JWT; in WHITESKY_ALLOWED_HOSTS too.', validators=[cloud.models.WhiteskyUrl()])),
                        ('customer_id', models.CharField(max_length=100, validators=[capvco_web.validators.VisibleText()])),
                        ('credential', capvco_web.encryption.EncryptedTextField(editable=False, help_text='The JWT; stored encrypted, never shown.', validators=[django.core.validators.MaxLengthValidator(8192), django.core.validators.RegexValidator('^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\Z', 'Give the JWT: three base64url parts separated by dots (header.claims.signature).')])),
                        ('orphan_auto_release', models.BooleanField(default=True, help_text='Release orphaned vGPU reservations and remove orphaned VMs named by us automatically, after the grace period and the confirmations; otherwise they wait for a person. Orphans not named by us always wait for a person.')),
                        ('orphan_grace_period', models.DurationField(default=datetime.timedelta(seconds=3600), help_text='How long an orphan waits before it is released or removed (0 to 90 days).', validators=[django.core.validators.MinValueValidator(datetime.timedelta(0)), django.core.validators.MaxValueValidator(datetime.timedelta(days=90))])),
                        ('orphan_confirmations', models.PositiveSmallIntegerField(default=3, help_text='Consecutive complete listings that must show a reservation orphaned before it is released automatically.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)])),
                        ('capi_kubeconfig', capvco_web.encryption.EncryptedTextField(blank=True, editable=False, help_text='The kubeconfig of a management cluster whose Cluster API objects define clusters of this account (imported: changed there, read-only here); stored encrypted, never shown. Empty: nothing is imported.')),
                        ('capi_import_complete', models.BooleanField(default=False, editable=False, help_text='Whether the last import listed every Cluster API object it reads. Nothing is deleted from a partial one.')),
                        ('capi_import_error', models.TextField(blank=True, editable=False)),
                        ('capi_import_started_at', models.DateTimeField(blank=True, editable=False, help_text="When the last import's listings began.", null=True)),
                        ('capi_last_complete_import_at', models.DateTimeField(blank=True, editable=False, help_text="When the last complete one's began.", null=True)),
                    ],
                    options={
                        'db_table': 'clusters_account',
                        'constraints': [models.CheckConstraint(condition=models.Q(('orphan_grace_period__gte', datetime.timedelta(0)), ('orphan_grace_period__lte', datetime.timedelta(days=90))), name='account_orphan_grace_period_bounded'), models.CheckConstraint(condition=models.Q(('orphan_confirmations__gte', 1), ('orphan_confirmations__lte', 100)), name='account_orphan_confirmations_bounded')],
                    },
                ),
                migrations.CreateModel(
                    name='Location',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100)),
                        ('currency', models.CharField(blank=True, max_length=8)),
                        ('vgu_price', models.DecimalField(decimal_places=4, default=Decimal('0'), help_text='Per vGPU and month', max_digits=12)),
                        ('observation_complete', models.BooleanField(default=False, help_text='Whether the last observation listed every GPU card and vGPU. A partially observed location takes no GPU decision.')),
                        ('observation_error', models.TextField(blank=True)),
                        ('observation_started_at', models.DateTimeField(blank=True, help_text='When the listings of the last observation began: what they show is true of that moment, not of anything changed later.', null=True)),
                        ('last_complete_observation_at', models.DateTimeField(blank=True, help_text='When the listings of the last complete one began.', null=True)),
                        ('account', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='locations', to='cloud.account')),
                    ],
                    options={
                        'db_table': 'clusters_location',
                    },
                ),
                migrations.CreateModel(
                    name='Image',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('image_id', models.PositiveIntegerField()),
                        ('name', models.CharField(max_length=200)),
                        ('status', models.CharField(max_length=32)),
                        ('os_type', models.CharField(blank=True, max_length=64)),
                        ('location', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='images', to='cloud.location')),
                    ],
                    options={
                        'db_table': 'clusters_image',
                    },
                ),
                migrations.CreateModel(
                    name='Cloudspace',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('cloudspace_id', models.CharField(max_length=100)),
                        ('name', models.CharField(max_length=200)),
                        ('status', models.CharField(max_length=32)),
                        ('location', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='cloudspaces', to='cloud.location')),
                    ],
                    options={
                        'db_table': 'clusters_cloudspace',
                    },
                ),
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('account', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='cloud.account')),
                        ('role', models.ForeignKey(help_text='viewer: reads; operator: also scales pools, deletes machines and clusters, releases reservations; admin: also the account, its sites, pools, clusters and members.', limit_choices_to={'name__in': ['viewer', 'operator', 'admin']}, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='auth.group')),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'clusters_membership',
                    },
                ),
                migrations.CreateModel(
                    name='VirtualMachine',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('cloudspace_id', models.CharField(max_length=100)),
                        ('vm_id', models.BigIntegerField()),
                        ('name', models.CharField(max_length=200)),
                        ('status', models.CharField(max_length=32)),
                        ('orphaned_since', models.DateTimeField(blank=True, null=True)),
                        ('orphan_confirmations', models.PositiveSmallIntegerField(default=0, help_text='Consecutive complete listings of its cloudspace that showed it orphaned')),
                        ('orphan_reason', models.CharField(blank=True, help_text='Why no machine owns it', max_length=300)),
                        ('location', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='vms', to='cloud.location')),
                    ],
                    options={
                        'db_table': 'clusters_virtualmachine',
                    },
                ),
                migrations.AddConstraint(
                    model_name='location',
                    constraint=models.UniqueConstraint(fields=('account', 'name'), name='location_unique_per_account'),
                ),
                migrations.AddConstraint(
                    model_name='image',
                    constraint=models.UniqueConstraint(fields=('location', 'image_id'), name='image_unique_per_location'),
                ),
                migrations.AddConstraint(
                    model_name='cloudspace',
                    constraint=models.UniqueConstraint(fields=('location', 'cloudspace_id'), name='cloudspace_unique_per_location'),
                ),
                migrations.AddConstraint(
                    model_name='membership',
                    constraint=models.UniqueConstraint(fields=('user', 'account'), name='one_membership_per_account'),
                ),
                migrations.AddIndex(
                    model_name='virtualmachine',
                    index=models.Index(fields=['location', 'name'], name='clusters_vi_locatio_bde637_idx'),
                ),
                migrations.AddConstraint(
                    model_name='virtualmachine',
                    constraint=models.UniqueConstraint(fields=('location', 'vm_id'), name='vm_unique_per_location'),
                ),
            ],
        ),
    ]
