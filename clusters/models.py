from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from capvco_web.encryption import EncryptedTextField
from gpus import naming

# Cluster, pool and machine names end up in VM and vGPU names
# (capvco-<cluster>-<machine>-gpu-<n>), so they are DNS labels.
dns_label = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$",
    "Use lowercase letters, digits and dashes; start and end with a letter or digit.",
)

driver_version = RegexValidator(
    r"^[0-9]+(\.[0-9]+){0,3}$", "Give a driver version such as 550.90.07, or leave it empty."
)

MAX_GPUS_PER_MACHINE = 8


def conflict(message: str) -> ValidationError:
    """A refusal because of what other rows hold (not of the values themselves): the API
    answers it 409."""
    return ValidationError(message, code="conflict")


class Account(models.Model):
    """A whitesky customer account, the credential to act on it, and its orphan policy."""

    name = models.CharField(max_length=100, unique=True)
    api_url = models.URLField(help_text="The VCO API base, e.g. https://vco.example/api/1")
    iam_url = models.URLField(help_text="The IAM host that refreshes the JWT")
    customer_id = models.CharField(max_length=100)
    credential = EncryptedTextField(help_text="The JWT; stored encrypted, never shown.")
    # On: an orphan named by us (our prefix, and a cluster of this account or none at all)
    # costs money every hour and nothing can take it over; docs/guides/gpu.md says more.
    orphan_auto_release = models.BooleanField(
        default=True,
        help_text="Release orphaned vGPU reservations and remove orphaned VMs named by us "
        "automatically, after the grace period and the confirmations; otherwise they wait "
        "for a person. Orphans not named by us always wait for a person.",
    )
    orphan_grace_period = models.DurationField(default=timedelta(hours=1))
    orphan_confirmations = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1)],
        help_text="Consecutive complete listings that must show a reservation orphaned "
        "before it is released automatically.",
    )

    def __str__(self) -> str:
        return self.name


class Location(models.Model):
    """A whitesky location as the account sees it (mirrored), and how well it was observed."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="locations")
    name = models.CharField(max_length=100)
    currency = models.CharField(max_length=8, blank=True)
    vgu_price = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal(0), help_text="Per vGPU and month"
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


class Cluster(models.Model):
    """A Kubernetes cluster whose machines are whitesky VMs."""

    class State(models.TextChoices):
        ACTIVE = "active"
        DELETING = "deleting"

    name = models.CharField(max_length=40, unique=True, validators=[dns_label])
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="clusters")
    state = models.CharField(max_length=16, choices=State, default=State.ACTIVE)
    deletion_blockers = models.JSONField(
        default=list, blank=True, help_text="While deleting: what still exists."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # VM and vGPU names carry the cluster name: they must read as this cluster's only
        # (see gpus.naming), against every cluster of every account, deleting ones too.
        if self.pk and Cluster.objects.filter(pk=self.pk).exclude(name=self.name).exists():
            raise ValidationError(
                {
                    "name": conflict(
                        "A cluster's name cannot change: its VM and vGPU names carry it."
                    )
                }
            )
        others = Cluster.objects.exclude(pk=self.pk) if self.pk else Cluster.objects.all()
        names = others.values_list("name", flat=True)
        if taken := naming.cluster_name_conflict(self.name, names):
            raise ValidationError({"name": conflict(taken)})


class ClusterSite(models.Model):
    """Where a cluster runs in one location: its cloudspace and the image of its VMs."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="sites")
    location = models.ForeignKey(Location, on_delete=models.PROTECT, related_name="sites")
    cloudspace_id = models.CharField(max_length=100)
    image_id = models.PositiveIntegerField()
    observation_error = models.TextField(
        blank=True,
        help_text="Why the last observation could not list the VMs of this cloudspace; while "
        "set, nothing is decided about the site's VMs.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "location"], name="one_site_per_location")
        ]

    def __str__(self) -> str:
        return f"{self.cluster} in {self.location}"

    def clean(self) -> None:
        if (
            self.location_id
            and self.cluster_id
            and self.location.account_id != self.cluster.account_id
        ):
            raise ValidationError(
                {"location": conflict("The location belongs to another account than the cluster.")}
            )


class MachinePool(models.Model):
    """A set of identical machines in one site; GPUs are asked for by type, never by id."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools")
    site = models.ForeignKey(ClusterSite, on_delete=models.PROTECT, related_name="pools")
    name = models.CharField(max_length=20, validators=[dns_label])
    replicas = models.PositiveSmallIntegerField(default=1, validators=[MaxValueValidator(100)])
    vcpus = models.PositiveSmallIntegerField(default=4, validators=[MinValueValidator(1)])
    memory_mib = models.PositiveIntegerField(default=8192, validators=[MinValueValidator(512)])
    disk_gib = models.PositiveIntegerField(default=50, validators=[MinValueValidator(10)])
    user_data = models.TextField(blank=True)
    gpu_type = models.CharField(
        max_length=100, blank=True, help_text='e.g. "NVIDIA A100"; resolved per location'
    )
    gpu_profile_id = models.CharField(
        max_length=100, blank=True, help_text="Escape hatch: one exact GPU profile (card) id"
    )
    gpu_count = models.PositiveSmallIntegerField(
        default=0, validators=[MaxValueValidator(MAX_GPUS_PER_MACHINE)]
    )
    gpu_driver_version = models.CharField(
        max_length=40,
        blank=True,
        validators=[driver_version],
        help_text="The NVIDIA driver the VM installs at first boot (cloud-init); empty: the "
        "image has the driver.",
    )
    next_index = models.PositiveIntegerField(
        default=0, editable=False, help_text="The index of the next machine: never reused."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"], name="pool_name_unique_per_cluster"
            ),
            models.CheckConstraint(
                condition=models.Q(gpu_count__lte=MAX_GPUS_PER_MACHINE),
                name="gpu_count_at_most_8",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # `next_index` moves only in machine_create, under the row's lock. An edit (API,
        # admin) saves a copy read before: writing it back would wind the index back, and
        # the next machine would take the name of one that exists or existed.
        if not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                f.name
                for f in self._meta.concrete_fields
                if not f.primary_key and f.name != "next_index"
            ]
        super().save(*args, **kwargs)

    def clean(self) -> None:
        errors: dict[str, str | ValidationError] = {}
        if self.gpu_count and not (self.gpu_type.strip() or self.gpu_profile_id.strip()):
            errors["gpu_type"] = "A pool with GPUs needs a GPU type (or a profile id)."
        if not self.gpu_count and (self.gpu_type or self.gpu_profile_id):
            errors["gpu_count"] = f"Give a GPU count from 1 to {MAX_GPUS_PER_MACHINE}."
        if self.site_id and self.cluster_id and self.site.cluster_id != self.cluster_id:
            errors["site"] = conflict("The site (location) does not belong to this cluster.")
        if name_error := self._name_error():
            errors["name"] = conflict(name_error)
        if errors:
            raise ValidationError(errors)

    def _name_error(self) -> str | None:
        # VM and vGPU names carry the pool name: within its cluster they must read as
        # this pool's only (see gpus.naming).
        if self.pk and MachinePool.objects.filter(pk=self.pk).exclude(name=self.name).exists():
            return "A pool's name cannot change: its VM and vGPU names carry it."
        if not self.cluster_id:
            return None  # a pool of a cluster being added: its formset compares the names
        siblings = MachinePool.objects.filter(cluster_id=self.cluster_id)
        if self.pk:
            siblings = siblings.exclude(pk=self.pk)
        names = siblings.values_list("name", flat=True)
        return naming.pool_name_conflict(self.name, names, cluster=self.cluster.name)

    @property
    def wants_gpus(self) -> bool:
        return self.gpu_count > 0


class Machine(models.Model):
    """One VM of a pool, and how far its provisioning or teardown got."""

    class Phase(models.TextChoices):
        PENDING = "pending"
        CREATING = "creating", "creating VM"
        ATTACHING = "attaching", "attaching GPUs"
        STARTING = "starting"
        RUNNING = "running"
        FAILED = "failed"
        DELETING = "deleting"

    pool = models.ForeignKey(MachinePool, on_delete=models.PROTECT, related_name="machines")
    name = models.CharField(max_length=64, validators=[dns_label])
    index = models.PositiveIntegerField()
    vm_id = models.BigIntegerField(null=True, blank=True)
    vm_created_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the VM was known to exist: only a VM listing begun after this can "
        "say that it vanished.",
    )
    vm_create_deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A VM create was sent and its answer not recorded: before this moment it "
        "may still land, so no second one is sent.",
    )
    gpu_driver_version = models.CharField(
        max_length=40, blank=True, help_text="The driver its VM was created to install"
    )
    phase = models.CharField(max_length=16, choices=Phase, default=Phase.PENDING)
    failure_message = models.TextField(blank=True)
    delete_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pool", "index"], name="machine_index_unique_per_pool"),
        ]

    def __str__(self) -> str:
        return f"{self.pool.cluster.name}/{self.name}"

    @property
    def vm_name(self) -> str:
        return naming.vm_name(self.pool.cluster.name, self.name)

    def vgpu_name(self, n: int) -> str:
        return naming.vgpu_name(self.pool.cluster.name, self.name, n)


class VirtualMachine(models.Model):
    """A VM listed in a cloudspace of a cluster site (mirrored)."""

    location = models.ForeignKey(Location, on_delete=models.CASCADE, related_name="vms")
    cloudspace_id = models.CharField(max_length=100)
    vm_id = models.BigIntegerField()
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=32)
    # A VM named by us that no machine owns is an orphan, billed like a reservation.
    orphaned_since = models.DateTimeField(null=True, blank=True)
    orphan_confirmations = models.PositiveSmallIntegerField(
        default=0,
        help_text="Consecutive complete listings of its cloudspace that showed it orphaned",
    )
    orphan_reason = models.CharField(max_length=300, blank=True, help_text="Why no machine owns it")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["location", "vm_id"], name="vm_unique_per_location")
        ]
        indexes = [models.Index(fields=["location", "name"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.vm_id})"
