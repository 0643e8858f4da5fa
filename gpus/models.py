from __future__ import annotations

from django.db import models

from clusters.models import Location


class GpuProfile(models.Model):
    """One physical GPU card in a location, as whitesky lists it (mirrored)."""

    location = models.ForeignKey(Location, on_delete=models.CASCADE, related_name="gpu_profiles")
    profile_id = models.CharField(max_length=100)
    vendor = models.CharField(max_length=100)
    model = models.CharField(
        max_length=200, help_text="Model string as listed, PCI address included"
    )
    pci_address = models.CharField(max_length=32, blank=True)
    description = models.TextField(blank=True)
    available_instances = models.PositiveIntegerField(default=0)
    last_seen_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "profile_id"], name="gpu_profile_unique_per_location"
            )
        ]

    def __str__(self) -> str:
        return f"{self.vendor} {self.model}"
