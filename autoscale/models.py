"""What the autoscaler found and could not mend: GPU pods no pool can take now."""

from __future__ import annotations

from django.db import models

from clusters.models import Cluster


class GpuShortfall(models.Model):
    """Pending GPU pods of one shape (type and count) that no autoscaled pool of the
    cluster can take now: every pool of their type at its max or its location without a
    card with room. Written by the autoscaler's pass alone; gone when a pass places them
    (or they stop waiting). A notice (gpu_no_capacity) tells of it once."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gpu_shortfalls")
    gpu_type = models.CharField(max_length=63, blank=True, help_text="Empty: any GPU node")
    gpus = models.PositiveSmallIntegerField(help_text="GPUs each pod asks for")
    pods = models.PositiveIntegerField()
    text = models.CharField(max_length=500)
    since = models.DateTimeField(help_text="When a pass first found it")
    oldest_pod_since = models.DateTimeField(help_text="When its oldest pod was first seen")
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "gpu_type", "gpus"], name="one_shortfall_per_shape"
            )
        ]

    def __str__(self) -> str:
        return self.text
