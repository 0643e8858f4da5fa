"""A day marker says how many hours its day summed, so the count outlives the hours."""

from datetime import timedelta

from django.db import migrations, models
from django.db.models import Max


def days_count(apps, schema_editor):  # type: ignore[no-untyped-def]
    Rollup = apps.get_model("billing", "Rollup")
    CapacityRollup = apps.get_model("billing", "CapacityRollup")
    CostRollup = apps.get_model("billing", "CostRollup")
    for marker in Rollup.objects.filter(step="day"):
        day = {"start__gte": marker.start, "start__lt": marker.start + timedelta(days=1)}
        # The hours if still kept; else what the day's rows were summed from (a capacity
        # row has the day's sampled hours; a location's cost row the hours it was seen).
        marker.samples = (
            Rollup.objects.filter(step="hour", **day).count()
            or CapacityRollup.objects.filter(step="day", start=marker.start).aggregate(
                n=Max("samples")
            )["n"]
            or CostRollup.objects.filter(step="day", start=marker.start, kind="location").aggregate(
                n=Max("samples")
            )["n"]
            or 0
        )
        marker.save(update_fields=["samples"])


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0006_month_rollups'),
    ]

    operations = [
        migrations.AddField(
            model_name='rollup',
            name='samples',
            field=models.PositiveSmallIntegerField(default=1, help_text="Hours sampled: 1 for an hour; a day's summed hours (kept after they go)"),
        ),
        migrations.RunPython(days_count, migrations.RunPython.noop),
    ]
