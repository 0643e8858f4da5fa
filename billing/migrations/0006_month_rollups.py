"""Month rows: each month's day rows summed (billing.rollups.month_sum), for the months
summed before there were month rows."""

from datetime import timedelta

from django.db import migrations, models
from django.db.models import Max, Sum

COST_SUMS = ("machines", "compute", "vgpu", "idle", "idle_gpus", "orphan_vgpu", "orphan_vm")
COST_KEYS = (
    "kind", "account_id", "location_id", "currency",
    "cluster_id", "cluster_name", "pool_id", "pool_name", "namespace",
)  # fmt: skip
CAPACITY_SUMS = ("free", "reserved", "attached", "allocatable", "requested")


def months_sum(apps, schema_editor):  # type: ignore[no-untyped-def]
    CostRollup = apps.get_model("billing", "CostRollup")
    CapacityRollup = apps.get_model("billing", "CapacityRollup")
    Rollup = apps.get_model("billing", "Rollup")
    days = Rollup.objects.filter(step="day").values_list("start", flat=True)
    for month in sorted({day.replace(day=1) for day in days}):
        end = (month + timedelta(days=32)).replace(day=1)
        in_month = {"step": "day", "start__gte": month, "start__lt": end}
        CostRollup.objects.bulk_create(
            [
                CostRollup(step="month", start=month, **row)
                for row in CostRollup.objects.filter(**in_month)
                .order_by()
                .values(*COST_KEYS)
                .annotate(samples=Sum("samples"), **{n: Sum(n) for n in COST_SUMS})
            ],
            batch_size=2000,
        )
        samples = sum(
            CapacityRollup.objects.filter(**in_month)
            .order_by()
            .values("start")
            .annotate(n=Max("samples"))
            .values_list("n", flat=True)
        )
        CapacityRollup.objects.bulk_create(
            [
                CapacityRollup(step="month", start=month, samples=samples, **row)
                for row in CapacityRollup.objects.filter(**in_month)
                .order_by()
                .values("location_id", "gpu_type")
                .annotate(**{n: Sum(n) for n in CAPACITY_SUMS})
            ],
            batch_size=2000,
        )


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0005_bill_item_cloudspace'),
    ]

    operations = [
        migrations.AlterField(
            model_name='capacityrollup',
            name='step',
            field=models.CharField(choices=[('hour', 'Hour'), ('day', 'Day'), ('month', 'Month')], max_length=8),
        ),
        migrations.AlterField(
            model_name='costrollup',
            name='step',
            field=models.CharField(choices=[('hour', 'Hour'), ('day', 'Day'), ('month', 'Month')], max_length=8),
        ),
        migrations.AlterField(
            model_name='rollup',
            name='step',
            field=models.CharField(choices=[('hour', 'Hour'), ('day', 'Day'), ('month', 'Month')], max_length=8),
        ),
        migrations.RunPython(months_sum, migrations.RunPython.noop),
    ]
