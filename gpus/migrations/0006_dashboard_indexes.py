from django.conf import settings
from django.db import DatabaseError, migrations, models, transaction

# The dashboard searches reservation names with `icontains` (UPPER(name) LIKE '%...%'); a
# trigram index keeps that from reading the whole table. PostgreSQL only (pg_trgm, a
# trusted extension the database's owner may create); without it the search still works,
# reading every row.
TRIGRAM_INDEX = (
    "CREATE INDEX IF NOT EXISTS reservation_name_trigram ON gpus_vgpureservation "
    "USING gin (UPPER(name) gin_trgm_ops)"
)


def trigram_index_create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic():
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            schema_editor.execute(TRIGRAM_INDEX)
    except DatabaseError as exc:
        print(f"\n  no trigram index on reservation names (the search reads every row): {exc}")


def trigram_index_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS reservation_name_trigram")


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0005_vm_orphans'),
        ('gpus', '0005_release_permission'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='vgpureservation',
            index=models.Index(fields=['created_at', 'id'], name='reservation_created'),
        ),
        migrations.AddIndex(
            model_name='vgpureservation',
            index=models.Index(fields=['name', 'id'], name='reservation_name'),
        ),
        migrations.AddIndex(
            model_name='vgpureservation',
            index=models.Index(fields=['location', 'vm_id'], name='reservation_vm'),
        ),
        migrations.AddIndex(
            model_name='vgpureservation',
            index=models.Index(fields=['location', 'gpu_id'], name='reservation_card'),
        ),
        migrations.AddIndex(
            model_name='vgpureservation',
            index=models.Index(condition=models.Q(('state__in', ('reserving', 'reserved', 'attached', 'releasing'))), fields=['created_at', 'id'], name='reservation_billed'),
        ),
        migrations.AddIndex(
            model_name='vgpureservation',
            index=models.Index(condition=models.Q(('name__startswith', 'capvco-'), _negated=True), fields=['created_at', 'id'], name='reservation_not_ours'),
        ),
        migrations.RunPython(trigram_index_create, trigram_index_drop),
    ]
