"""What the account and the cloud have: whitesky accounts and their members, and what
whitesky shows of them (locations, cloudspaces, images, VMs), below every other app."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
)
from django.db import connection, models, transaction
from django.utils import timezone
from django.utils.deconstruct import deconstructible

from capvco_web.encryption import EncryptedTextField
from capvco_web.integrations.kube import KubeconfigInvalid
from capvco_web.integrations.whitesky import AllowedHosts
from capvco_web.integrations.whitesky.auth import JWT_PATTERN, MAX_JWT_LENGTH
from capvco_web.validators import kubeconfig_checked, visible_text

# A JWT is three base64url parts (header, claims, signature); nothing else is a credential.
# The client takes a refreshed token only in the same shape (auth.JWT_PATTERN).
jwt_shape = RegexValidator(
    f"^{JWT_PATTERN}\\Z",
    "Give the JWT: three base64url parts separated by dots (header.claims.signature).",
)
MAX_CREDENTIAL_LENGTH = MAX_JWT_LENGTH

MAX_ORPHAN_GRACE_PERIOD = timedelta(days=90)
MAX_ORPHAN_CONFIRMATIONS = 100


def whitesky_allowed_hosts() -> AllowedHosts:
    """The hosts an account's credential may be sent to (settings.WHITESKY_ALLOWED_HOSTS)."""
    return AllowedHosts(settings.WHITESKY_ALLOWED_HOSTS, source="WHITESKY_ALLOWED_HOSTS")


@deconstructible
class WhiteskyUrl:
    """An account's API or IAM URL must be one the credential may be sent to, written
    plainly (`https://host[:port]/path`, no query or fragment): a rule the API's schema
    states whole, as a pattern of the allowed hosts (`json_schema`)."""

    def __call__(self, value: str) -> None:
        hosts = whitesky_allowed_hosts()
        if refusal := hosts.refusal(value):
            raise ValidationError(refusal, code="host_not_allowed")
        if not re.fullmatch(hosts.url_pattern(), value):
            raise ValidationError(
                "Write the URL plainly: https://host[:port]/path, the host in lower case, no "
                "query, fragment or trailing dot, a port without leading zeros.",
                code="url_form",
            )

    def json_schema(self, direction: str) -> dict[str, str]:
        # Of what is sent only: a stored URL may predate the rule or the list.
        return {"pattern": whitesky_allowed_hosts().url_pattern()} if direction == "request" else {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WhiteskyUrl)

    def __hash__(self) -> int:
        return hash(WhiteskyUrl)


# One instance: migrations name it (cloud.models.whitesky_url).
whitesky_url = WhiteskyUrl()


NAMES_LOCK = 0x63617076  # the advisory lock that serialises cluster and pool creates


def names_lock() -> None:
    """Until the transaction ends, no other cluster or pool create passes this point, so
    the name check after it sees every committed name: creates of `x` and `x-y` at once
    cannot both pass. SQLite has one writer at a time already."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [NAMES_LOCK])


def conflict(message: str) -> ValidationError:
    """A refusal because of what other rows hold (not of the values themselves): the API
    answers it 409."""
    return ValidationError(message, code="conflict")


def whitesky_customer(customer_id: str) -> str:
    """Which whitesky customer an account names: its customer id (any case, outer spaces
    ignored), whatever API host reaches it. Taking two customers for one only makes a name
    rule stricter; taking one customer for two (a VCO reached through two host names)
    would let one account's orphan sweep remove the other's live VMs and vGPUs, and two
    of our clusters own the same VM names."""
    return customer_id.strip().casefold()


def same_customer_account_ids(customer_id: str) -> set[int]:
    """Every account of ours that names this whitesky customer: their clusters' VMs and
    vGPUs may be in the same listings, so cluster names must be unambiguous among them."""
    customer = whitesky_customer(customer_id)
    rows = Account.objects.values_list("pk", "customer_id")
    return {pk for pk, cid in rows if whitesky_customer(cid) == customer}


class Account(models.Model):
    """A whitesky customer account, the credential to act on it, and its orphan policy."""

    name = models.CharField(max_length=100, unique=True, validators=[visible_text])
    api_url = models.URLField(
        validators=[whitesky_url],
        help_text="The VCO API base, e.g. https://vco.example/api/1; its host must be in "
        "WHITESKY_ALLOWED_HOSTS.",
    )
    iam_url = models.URLField(
        validators=[whitesky_url],
        help_text="The IAM host that refreshes the JWT; in WHITESKY_ALLOWED_HOSTS too.",
    )
    customer_id = models.CharField(max_length=100, validators=[visible_text])
    credential = EncryptedTextField(
        validators=[MaxLengthValidator(MAX_CREDENTIAL_LENGTH), jwt_shape],
        help_text="The JWT; stored encrypted, never shown.",
    )
    # On: an orphan named by us (our prefix, and a cluster of this account or none at all)
    # costs money every hour and nothing can take it over; docs/guides/gpu.md says more.
    orphan_auto_release = models.BooleanField(
        default=True,
        help_text="Release orphaned vGPU reservations and remove orphaned VMs named by us "
        "automatically, after the grace period and the confirmations; otherwise they wait "
        "for a person. Orphans not named by us always wait for a person.",
    )
    orphan_grace_period = models.DurationField(
        default=timedelta(hours=1),
        validators=[
            MinValueValidator(timedelta(0)),
            MaxValueValidator(MAX_ORPHAN_GRACE_PERIOD),
        ],
        help_text="How long an orphan waits before it is released or removed (0 to 90 days).",
    )
    orphan_confirmations = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ORPHAN_CONFIRMATIONS)],
        help_text="Consecutive complete listings that must show a reservation orphaned "
        "before it is released automatically.",
    )
    # Off: a kubeconfig that skips the check of the API server's certificate is refused,
    # stored or used (anyone on the way could take its credential).
    kube_insecure_tls_allowed = models.BooleanField(
        "allow insecure TLS to Kubernetes",
        default=False,
        help_text="Accept kubeconfigs with insecure-skip-tls-verify: true (the API server's "
        "certificate is then not checked). Off: they are refused, and those stored are no "
        "longer used.",
    )
    # Cluster API import: clusters and pools defined in a management cluster.
    capi_kubeconfig = EncryptedTextField(
        blank=True,
        help_text="The kubeconfig of a management cluster whose Cluster API objects define "
        "clusters of this account (imported: changed there, read-only here); stored "
        "encrypted, never shown. Empty: nothing is imported.",
    )
    capi_import_complete = models.BooleanField(
        default=False,
        editable=False,
        help_text="Whether the last import listed every Cluster API object it reads. "
        "Nothing is deleted from a partial one.",
    )
    capi_import_error = models.TextField(blank=True, editable=False)
    capi_import_started_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the last import's listings began."
    )
    capi_last_complete_import_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the last complete one's began."
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(
                    orphan_grace_period__gte=timedelta(0),
                    orphan_grace_period__lte=MAX_ORPHAN_GRACE_PERIOD,
                ),
                name="account_orphan_grace_period_bounded",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    orphan_confirmations__gte=1,
                    orphan_confirmations__lte=MAX_ORPHAN_CONFIRMATIONS,
                ),
                name="account_orphan_confirmations_bounded",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            super().save(*args, **kwargs)
            return
        with transaction.atomic():
            names_lock()  # clean() checked without it; checked again here, under it
            self._customer_move_check()
            super().save(*args, **kwargs)

    @property
    def has_capi_kubeconfig(self) -> bool:
        return bool(self.capi_kubeconfig)

    def clean(self) -> None:
        if self.capi_kubeconfig:
            try:
                kubeconfig_checked(
                    self.capi_kubeconfig, insecure_allowed=self.kube_insecure_tls_allowed
                )
            except KubeconfigInvalid as exc:
                raise ValidationError({"capi_kubeconfig": str(exc)}) from exc
        self._customer_move_check()

    def _customer_move_check(self) -> None:
        """An account that comes to name another whitesky customer (its customer id
        changed) brings what carries its names there (clusters: their VM names): refused
        (409) when an app above says they would be ambiguous with the names of that
        customer's other accounts (CUSTOMER_MOVE_CHECKS)."""
        if self.pk is None:
            return
        stored = Account.objects.filter(pk=self.pk).values_list("customer_id", flat=True).first()
        if stored is None or whitesky_customer(stored) == whitesky_customer(self.customer_id):
            return
        accounts = same_customer_account_ids(self.customer_id) - {self.pk}
        for check in CUSTOMER_MOVE_CHECKS:
            if refusal := check(self, accounts):
                raise ValidationError({"customer_id": conflict(refusal)})


# Why an account may not move to another whitesky customer, as each app above that names
# things per customer answers it (the account, the ids of the customer's other accounts;
# None: it may). Filled from the apps' AppConfig.ready().
CUSTOMER_MOVE_CHECKS: list[Callable[[Account, set[int]], str | None]] = []


class Membership(models.Model):
    """A user's role in one account: what they may see and do there (capvco_web.permissions)."""

    class Role(models.TextChoices):
        # The names of the groups that hold each role's permissions.
        VIEWER = "viewer"
        OPERATOR = "operator"
        ADMIN = "admin"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="memberships")
    role = models.ForeignKey(
        Group,
        on_delete=models.PROTECT,
        related_name="+",
        limit_choices_to={"name__in": Role.values},
        help_text="viewer: reads; operator: also scales pools, deletes machines and "
        "clusters, releases reservations; admin: also the account, its sites, pools, "
        "clusters and members.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "account"], name="one_membership_per_account")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.account} ({self.role})"

    def clean(self) -> None:
        if self.role_id and self.role.name not in self.Role.values:
            raise ValidationError({"role": f"Choose one of {', '.join(self.Role.values)}."})


class Location(models.Model):
    """A whitesky location as the account sees it (mirrored), and how well it was observed."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="locations")
    name = models.CharField(max_length=100)
    currency = models.CharField(max_length=8, blank=True)
    vgu_price = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal(0), help_text="Per vGPU and month"
    )
    prices = models.JSONField(
        default=dict,
        blank=True,
        help_text="The account's monthly price per unit here, as whitesky lists them "
        "(vcu: a vCPU, mu: a GiB of memory, su: a TB of disk, vgu: a vGPU, ...)",
    )
    observation_complete = models.BooleanField(
        default=False,
        help_text="Whether the last observation listed every GPU card and vGPU. A partially "
        "observed location takes no GPU decision.",
    )
    observation_error = models.TextField(blank=True)
    observation_started_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the listings of the last observation began: what they show is true "
        "of that moment, not of anything changed later.",
    )
    last_complete_observation_at = models.DateTimeField(
        null=True, blank=True, help_text="When the listings of the last complete one began."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "name"], name="location_unique_per_account")
        ]

    def __str__(self) -> str:
        return self.name

    def unit_price(self, unit: str) -> Decimal:
        """The monthly price of one unit (`vcu`, `mu`, ...) here; 0 when none is listed."""
        return Decimal(str(self.prices.get(unit, 0)))


class VirtualMachine(models.Model):
    """A VM listed in a cloudspace of a cluster site (mirrored)."""

    location = models.ForeignKey(Location, on_delete=models.CASCADE, related_name="vms")
    cloudspace_id = models.CharField(max_length=100)
    vm_id = models.BigIntegerField()
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=32)
    vcpus = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveIntegerField(default=0)
    # A VM named by us that no machine owns is an orphan, billed like a reservation.
    orphaned_since = models.DateTimeField(null=True, blank=True)
    orphan_confirmations = models.PositiveSmallIntegerField(
        default=0,
        help_text="Consecutive complete listings of its cloudspace that showed it orphaned",
    )
    orphan_reason = models.CharField(max_length=300, blank=True, help_text="Why no machine owns it")
    first_seen_at = models.DateTimeField(
        default=timezone.now, help_text="When a listing first showed it"
    )
    changed_at = models.DateTimeField(
        default=timezone.now,
        help_text="When a listing last showed it changed (name, status, size) or first showed "
        "it: only a complete listing begun after this may decide to remove it.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["location", "vm_id"], name="vm_unique_per_location")
        ]
        indexes = [models.Index(fields=["location", "name"])]
        permissions = [
            ("remove_virtualmachine", "Can remove a VM that no machine owns"),
            ("remove_foreign_virtualmachine", "Can remove a VM not named by us"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.vm_id})"

    def compute_monthly_price(self) -> Decimal:
        """What its vCPUs and memory cost per month at the location's prices. Disks,
        IOPS and public addresses are not listed with the VM, so not counted; its vGPUs
        are reservations of their own."""
        location = self.location
        memory_gib = Decimal(self.memory_mib) / 1024
        return self.vcpus * location.unit_price("vcu") + memory_gib * location.unit_price("mu")


class Cloudspace(models.Model):
    """A cloudspace of the account at a location (mirrored): where a site's VMs can go."""

    location = models.ForeignKey(Location, on_delete=models.CASCADE, related_name="cloudspaces")
    cloudspace_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=32)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "cloudspace_id"], name="cloudspace_unique_per_location"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.cloudspace_id})"


class Image(models.Model):
    """An image the account can boot VMs from at a location (mirrored)."""

    location = models.ForeignKey(Location, on_delete=models.CASCADE, related_name="images")
    image_id = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=32)
    os_type = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "image_id"], name="image_unique_per_location"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.image_id})"
