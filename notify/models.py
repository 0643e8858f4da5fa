"""Webhook targets of an account, and the notices sent to them."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from capvco_web.encryption import EncryptedTextField
from notify.hosts import webhook_url_refusal


class Reason(models.TextChoices):
    """What a notice tells of."""

    VGPU_ORPHAN = "vgpu_orphan", "orphaned vGPU"
    VM_ORPHAN = "vm_orphan", "orphan VM"
    VGPU_ORPHAN_PAST_GRACE = "vgpu_orphan_past_grace", "orphaned vGPU past its grace period"
    VM_ORPHAN_PAST_GRACE = "vm_orphan_past_grace", "orphan VM past its grace period"
    MACHINE_FAILED = "machine_failed", "failed machine"
    MACHINE_STUCK = "machine_stuck", "machine stuck waiting for capacity"
    LOCATION_STALE = "location_stale", "stale location"
    IDLE_GPUS = "idle_gpus", "GPUs idle past the threshold"
    UNEXPLAINED_BILL = "unexplained_bill", "unexplained bill"


def reasons_check(value: object) -> None:
    if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
        raise ValidationError("Give a list of reasons.")
    unknown = sorted(set(value) - set(Reason.values))
    if unknown:
        raise ValidationError(
            f"Not reasons: {', '.join(unknown)}; choose from {', '.join(Reason.values)}."
        )


def _all_reasons() -> list[str]:
    return list(Reason.values)


class WebhookTarget(models.Model):
    """Where an account's notices are posted, signed with the target's secret."""

    class Kind(models.TextChoices):
        JSON = "json", "generic JSON"
        SLACK = "slack", "Slack-compatible"

    account = models.ForeignKey(
        "cloud.Account", on_delete=models.CASCADE, related_name="webhook_targets"
    )
    name = models.CharField(max_length=100)
    url = models.URLField(
        max_length=500,
        help_text="Where notices are posted; its host must be in NOTIFY_WEBHOOK_HOSTS.",
    )
    kind = models.CharField(max_length=8, choices=Kind, default=Kind.JSON)
    secret = EncryptedTextField(
        blank=True,
        help_text="The HMAC-SHA256 key of X-Capvco-Signature; stored encrypted, never shown.",
    )
    enabled = models.BooleanField(default=True)
    reasons = models.JSONField(
        default=_all_reasons, validators=[reasons_check], help_text="The reasons sent here"
    )
    per_minute = models.PositiveSmallIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(600)],
        help_text="At most this many messages a minute; the rest wait for the next minute.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "name"], name="webhook_target_unique_per_account"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.url and (refused := webhook_url_refusal(self.url)):
            raise ValidationError({"url": refused})


class Notice(models.Model):
    """One thing told to one target: open while it holds, sent once when it opened."""

    target = models.ForeignKey(WebhookTarget, on_delete=models.CASCADE, related_name="notices")
    reason = models.CharField(max_length=32, choices=Reason)
    # What it is of: the vGPU id, the VM id, the machine's or the location's pk, with its
    # location where ids are per location ("<location pk>:<vgpu id>").
    key = models.CharField(max_length=200)
    summary = models.CharField(max_length=500)
    details = models.JSONField(default=dict)
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    tried_at = models.DateTimeField(null=True, blank=True, help_text="When it was last posted")
    next_try_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    given_up_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a post failed in a way trying again cannot mend (a 4xx, a URL no "
        "longer allowed): tried again once the target is changed.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["target", "reason", "key"],
                condition=models.Q(closed_at__isnull=True),
                name="notice_one_open_per_target_reason_key",
            )
        ]
        indexes = [models.Index(fields=["sent_at", "next_try_at"], name="notice_due")]

    def __str__(self) -> str:
        return f"{self.get_reason_display()}: {self.summary}"
