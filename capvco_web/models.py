from __future__ import annotations

from django.conf import settings
from django.db import models


class Heartbeat(models.Model):
    """When a periodic signal (the beat tick) was last seen running on a worker."""

    name = models.CharField(max_length=64, unique=True)
    ticked_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.ticked_at:%Y-%m-%d %H:%M:%S}"


class AuditEvent(models.Model):
    """Who did what to which object, why, and how it looked before and after."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(
        max_length=150, help_text="The user, or the system component that acted."
    )
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=128)
    object_repr = models.CharField(max_length=255)
    reason = models.TextField(blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    # The account of the object, so that its members see the event. No constraint: the
    # history of an account outlives the account.
    account = models.ForeignKey(
        "cloud.Account",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["object_type", "object_id"]),
            models.Index(fields=["account", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.object_type} {self.object_repr}"


# Every API token starts with this, so that a leaked one is easy to recognise (and scan for).
API_TOKEN_PREFIX = "capvco_"  # noqa: S105 (a prefix, not a secret)


class ApiToken(models.Model):
    """A user's key to the API (`Authorization: Bearer capvco_<key_id>_<secret>`).

    Only a SHA-256 of the whole token is kept: the token is shown once, when it is made
    (capvco_web/tokens.py). `key_id` is not secret: it finds the row and names the token
    in lists and in the audit trail.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, help_text="What the token is for.")
    key_id = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Updated at most once a minute."
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from then on; empty: until revoked."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"

    @property
    def prefix(self) -> str:
        """The start of the token, enough to recognise it."""
        return f"{API_TOKEN_PREFIX}{self.key_id}"


class PlanPass(models.Model):
    """One pass of a plan (`capvco_web.plans.PassRecord`): its scope (a cluster, its NICs, or
    a location), what was planned, what came of each step, and how long planning and acting
    took. Only the last PLAN_PASSES_KEPT of a scope are kept."""

    class Scope(models.TextChoices):
        CLUSTER = "cluster"
        LOCATION = "location"
        NICS = "nics"
        POOLS = "pools"  # a cluster's pool autoscaler

    scope = models.CharField(max_length=16, choices=Scope.choices)
    # No constraint: a deleted cluster's last passes stay readable until pruned.
    scope_id = models.IntegerField()
    started_at = models.DateTimeField()
    planned = models.JSONField(default=list, help_text="Each step: kind, target, reason.")
    outcomes = models.JSONField(
        default=list, help_text="Each step acted on: kind, target, outcome, message."
    )
    plan_ms = models.PositiveIntegerField(default=0)
    act_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["scope", "scope_id", "-id"])]

    def __str__(self) -> str:
        return f"{self.scope} {self.scope_id} pass at {self.started_at:%Y-%m-%d %H:%M:%S}"

    def of(self, *outcomes: str) -> list[dict[str, str]]:
        return [o for o in self.outcomes if o["outcome"] in outcomes]

    @property
    def ran(self) -> list[dict[str, str]]:
        return self.of("ran", "sent")

    @property
    def not_ran(self) -> list[dict[str, str]]:
        """Dropped, blocked, waiting or failed, each with why."""
        return self.of("dropped", "blocked", "waiting", "failed")

    @property
    def duration_ms(self) -> int:
        return self.plan_ms + self.act_ms
