from django.db import migrations, models

SPEC_FIELDS = ("gpu_type", "gpu_profile_id", "gpu_count", "vcpus", "memory_mib", "disk_gib")


def specs_from_pools(apps, schema_editor):
    """Machines made before their spec was recorded: taken to be as their pool is now, so
    that an upgrade replaces none of them."""
    MachinePool = apps.get_model("clusters", "MachinePool")
    Machine = apps.get_model("clusters", "Machine")
    for pool in MachinePool.objects.all():
        spec = {name: getattr(pool, name) for name in SPEC_FIELDS}
        Machine.objects.filter(pool=pool).update(spec=spec)


class Migration(migrations.Migration):

    dependencies = [
        ("clusters", "0018_pool_gpu_fit_refusal"),
    ]

    operations = [
        migrations.AddField(
            model_name="machine",
            name="spec",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="What its VM was created with, from its pool (GPU type, profile and count, vCPUs, memory, disk); empty: no VM created yet. A machine whose spec differs from its pool's is replaced, one machine of the pool at a time.",
            ),
        ),
        migrations.RunPython(specs_from_pools, migrations.RunPython.noop),
    ]
