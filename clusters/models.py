from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from capvco_web.encryption import EncryptedTextField

# Cluster names end up in vGPU names (capvco-<cluster>-<machine>-gpu-<n>) and DNS labels.
dns_label = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    "Use lowercase letters, digits and dashes; start and end with a letter or digit.",
)


class Account(models.Model):
    """A whitesky customer account, and the credential to act on it."""

    name = models.CharField(max_length=100, unique=True)
    api_url = models.URLField(help_text="The VCO API base, e.g. https://vco.example/api/1")
    iam_url = models.URLField(help_text="The IAM host that refreshes the JWT")
    customer_id = models.CharField(max_length=100)
    credential = EncryptedTextField(help_text="The JWT; stored encrypted, never shown.")

    def __str__(self) -> str:
        return self.name


class Location(models.Model):
    """A whitesky location as the account sees it (mirrored)."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="locations")
    name = models.CharField(max_length=100)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "name"], name="location_unique_per_account")
        ]

    def __str__(self) -> str:
        return self.name


class Cluster(models.Model):
    """A Kubernetes cluster whose machines are whitesky VMs."""

    name = models.CharField(max_length=40, unique=True, validators=[dns_label])
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="clusters")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name
