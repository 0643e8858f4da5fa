"""Webhook targets of an account, and the notices sent to them."""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    URLValidator,
)
from django.db import models

from capvco_web.encryption import EncryptedTextField, EncryptedUrlField, url_shown
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
    GPU_NODE_NOT_VERIFIED = "gpu_node_not_verified", "GPU node not verified"
    GPU_NO_CAPACITY = "gpu_no_capacity", "GPU pods pending with no capacity to grow"


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


SECRET_PREFIX = "whsec_"  # noqa: S105 - Standard Webhooks' prefix, not a secret
WHSEC_FORM = (
    "write it as Standard Webhooks does: whsec_ and 24 to 64 random bytes in base64, "
    "e.g. what this prints: echo whsec_$(openssl rand -base64 32)"
)


def secret_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret: the bytes the base64 stands for, as
    Standard Webhooks' libraries read it. ValueError when it is not one."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("it does not start with whsec_")
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error:
        raise ValueError("what follows whsec_ is not base64") from None


def secret_check(value: str) -> None:
    if not value:
        return
    try:
        key = secret_key(value)
    except ValueError as exc:
        raise ValidationError(f"Not a webhook secret: {exc}; {WHSEC_FORM}.") from None
    if not 24 <= len(key) <= 64:
        raise ValidationError(f"Not a webhook secret: it holds {len(key)} bytes; {WHSEC_FORM}.")


class WebhookTarget(models.Model):
    """Where an account's notices are posted, signed with the target's secret."""

    class Kind(models.TextChoices):
        JSON = "json", "generic JSON"
        SLACK = "slack", "Slack-compatible"

    account = models.ForeignKey(
        "cloud.Account", on_delete=models.CASCADE, related_name="webhook_targets"
    )
    name = models.CharField(max_length=100)
    # A credential (a Slack incoming webhook's URL is what posts to the channel): encrypted,
    # shown and audited as its scheme and host only (url_shown). Editable: the admin form
    # takes a new one, and never renders the stored one.
    url = EncryptedUrlField(
        editable=True,
        validators=[URLValidator(schemes=["http", "https"]), MaxLengthValidator(500)],
        help_text="Where notices are posted; its host must be in NOTIFY_WEBHOOK_HOSTS. Stored "
        "encrypted, shown as its scheme and host only.",
    )
    kind = models.CharField(max_length=8, choices=Kind, default=Kind.JSON)
    secret = EncryptedTextField(
        blank=True,
        validators=[secret_check],
        help_text="whsec_<base64>: the key of the webhook-signature (Standard Webhooks); stored "
        "encrypted, never shown.",
    )
    # The secret before the last change, signing too until `previous_secret_until`, so a
    # receiver moves to the new one without a message it cannot verify.
    previous_secret = EncryptedTextField(blank=True)
    previous_secret_until = models.DateTimeField(null=True, blank=True)
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

    # How long a replaced secret still signs.
    SECRET_OVERLAP = timedelta(hours=24)

    def clean(self) -> None:
        if self._state.adding and self.account_id is not None:
            targets_bound_check(self.account_id)
        if self.url and (refused := webhook_url_refusal(self.url)):
            raise ValidationError({"url": refused})

    @property
    def url_shown(self) -> str:
        return url_shown(self.url) if self.url else ""

    def secret_replace(self, secret: str, *, now: datetime) -> None:
        """Sign with `secret` from now on, and with the one it replaces for SECRET_OVERLAP
        more (none when either is empty)."""
        if secret == self.secret:
            return
        keep = bool(secret and self.secret)
        self.previous_secret = self.secret if keep else ""
        self.previous_secret_until = now + self.SECRET_OVERLAP if keep else None
        self.secret = secret

    def signing_secrets(self, *, now: datetime) -> list[str]:
        """The secrets a message sent at `now` is signed with, the current one first."""
        if not self.secret:
            return []
        until = self.previous_secret_until
        if self.previous_secret and until is not None and now < until:
            return [self.secret, self.previous_secret]
        return [self.secret]


class Notice(models.Model):
    """One thing told to one target: open while it holds, sent once when it opened."""

    target = models.ForeignKey(WebhookTarget, on_delete=models.CASCADE, related_name="notices")
    # The webhook-id of its posts: the same for each post of it, so a receiver drops a repeat.
    message_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
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

    @property
    def webhook_id(self) -> str:
        return f"msg_{self.message_id.hex}"


def targets_bound_check(account_id: int) -> None:
    """Refuse one more target to an account that has NOTIFY_TARGETS_PER_ACCOUNT: each is
    posted to in the account's pass, which has a bounded time."""
    bound: int = settings.NOTIFY_TARGETS_PER_ACCOUNT
    if WebhookTarget.objects.filter(account_id=account_id).count() >= bound:
        raise ValidationError(
            f"The account has {bound} webhook targets, the most NOTIFY_TARGETS_PER_ACCOUNT "
            "allows: delete one, or give one of them more reasons."
        )


class WebhookTest(models.Model):
    """A test message a person asked for: a worker posts it, as it posts notices, and its
    result (what the receiver answered, for the target's admins only) is kept here."""

    target = models.ForeignKey(WebhookTarget, on_delete=models.CASCADE, related_name="tests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    # Claimed by the worker that posts it (compare-and-set): a redelivered task posts nothing.
    started_at = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="Empty once the receiver took it")

    class Meta:
        indexes = [models.Index(fields=["target", "-requested_at"], name="webhook_test_recent")]

    def __str__(self) -> str:
        return f"test of {self.target}"
