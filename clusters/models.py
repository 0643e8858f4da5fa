from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
)
from django.db import models, transaction
from django.db.models import Q
from django.utils.deconstruct import deconstructible

from capvco_web.encryption import EncryptedTextField
from capvco_web.environment import POOL_REPLICAS_CEILING
from capvco_web.integrations.kube import KubeconfigInvalid, kubeconfig_load
from capvco_web.validators import kubeconfig_checked, visible_text
from cloud.models import (
    Account,
    Location,
    conflict,
    names_lock,
    same_customer_account_ids,
)
from gpus import naming
from gpus.resolve import CAPACITY_WAIT, location_fit_refusal

# Cluster, pool and machine names end up in VM and vGPU names
# (capvco-<cluster>-<machine>-gpu-<n>), so they are DNS labels. `\Z`, not `$`, which would
# let a final line break through.
dns_label = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?\Z",
    "Use lowercase letters, digits and dashes; start and end with a letter or digit.",
)

driver_version = RegexValidator(
    r"^[0-9]+(\.[0-9]+){0,3}\Z", "Give a driver version such as 550.90.07, or leave it empty."
)

MAX_GPUS_PER_MACHINE = 8
# Bounds of a pool's machines, the same on SQLite and PostgreSQL (and well inside both).
MAX_VCPUS = 256
MIN_MEMORY_MIB, MAX_MEMORY_MIB = 512, 4 * 1024 * 1024  # 4 TiB
MIN_DISK_GIB, MAX_DISK_GIB = 10, 64 * 1024  # 64 TiB
MAX_REPLICAS = POOL_REPLICAS_CEILING  # what the database holds; people meet POOL_MAX_REPLICAS
MAX_INT32 = 2**31 - 1  # whitesky ids that are integers (images)
# whitesky documents no bound for user data (it travels in the VM create's query string);
# ours keeps every row, call and page of it bounded: 64 Ki characters (64 KiB of ASCII).
MAX_USER_DATA_LENGTH = 65_536
# What a machine's VM and vGPUs are made with, from its pool: a machine made with other
# values is outdated, and the plan replaces it (clusters.plan.rollout_step).
GPU_SPEC_FIELDS = ("gpu_type", "gpu_profile_id", "gpu_count")
SPEC_FIELDS = (*GPU_SPEC_FIELDS, "vcpus", "memory_mib", "disk_gib")


def cluster_name_refusal(name: str, account_id: int, *, exclude: int | None = None) -> str | None:
    """Why a cluster of the account cannot be named `name` (None: it can). Against the
    clusters of its own account the answer names the cluster in the way, which an admin of
    the account sees anyway. Against those of another account of the same whitesky
    customer (which the caller may not see) it says only that the name is not available:
    not which cluster, which account, or that one exists."""
    account = Account.objects.get(pk=account_id)
    accounts = same_customer_account_ids(account.customer_id) | {account_id}
    clusters = Cluster.objects.filter(account_id__in=accounts)
    if exclude is not None:
        clusters = clusters.exclude(pk=exclude)
    own: list[str] = []
    others: list[str] = []
    for other, other_account in clusters.values_list("name", "account_id"):
        (own if other_account == account_id else others).append(other)
    return naming.cluster_name_conflict(name, own) or naming.cluster_name_unavailable(name, others)


def account_customer_move_refusal(account: Account, others: set[int]) -> str | None:
    """Why the account may not come to name the whitesky customer of the accounts `others`:
    its clusters' VM names would be ambiguous with those of the clusters there
    (cloud.models.CUSTOMER_MOVE_CHECKS)."""
    there = list(Cluster.objects.filter(account_id__in=others).values_list("name", flat=True))
    for name in account.clusters.order_by("name").values_list("name", flat=True):
        if refusal := naming.cluster_name_unavailable(name, there):
            return f"This account's clusters cannot move there. {refusal}"
    return None


IMPORTED_READ_ONLY = (
    "{what} is imported from Cluster API ({source}): change it in the management cluster, not here."
)


class Cluster(models.Model):
    """A Kubernetes cluster whose machines are whitesky VMs."""

    class State(models.TextChoices):
        ACTIVE = "active"
        DELETING = "deleting"

    # Unique, and unambiguous as a VM name prefix, among the clusters of one whitesky
    # customer (cluster_name_refusal); free across customers. The database holds the part
    # it can: one name per account.
    name = models.CharField(max_length=40, validators=[dns_label])
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="clusters")
    state = models.CharField(max_length=16, choices=State, default=State.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    # Kubernetes: the workload cluster's API (how it was observed: kube.ClusterObservation).
    kubeconfig = EncryptedTextField(
        blank=True,
        help_text="The workload cluster's kubeconfig (its current context is used); stored "
        "encrypted, never shown. Empty: its nodes and pods are not observed.",
    )
    # The GPU add-on: the NVIDIA device plugin, applied to the workload cluster.
    gpu_addon = models.BooleanField(
        default=False,
        verbose_name="GPU add-on",
        help_text="Apply the NVIDIA device plugin (a DaemonSet in kube-system) to the "
        "workload cluster, so that its GPU nodes advertise nvidia.com/gpu; off removes it. "
        "Needs a kubeconfig. Imported clusters: their Cluster API label "
        "capvco.infrastructure.cluster.x-k8s.io/gpu: nvidia decides.",
    )
    imported_from = models.CharField(
        max_length=300,
        blank=True,
        editable=False,
        help_text="The Cluster API Cluster it mirrors (<namespace>/<name> in its account's "
        "management cluster). An imported cluster, its sites and pools change there only.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "name"], name="cluster_name_unique_per_account"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            super().save(*args, **kwargs)
            return
        with transaction.atomic():
            names_lock()  # clean() checked without it; checked again here, under it
            if self.account_id and (taken := cluster_name_refusal(self.name, self.account_id)):
                raise ValidationError({"name": conflict(taken)})
            super().save(*args, **kwargs)

    @property
    def deletion_blockers(self) -> list[str]:
        """While deleting: what still exists, as act's last pass found it (ClusterStatus)."""
        try:
            status = self.status
        except ClusterStatus.DoesNotExist:
            return []
        return list(status.deletion_blockers)

    @property
    def plan_unchanged_since(self) -> datetime | None:
        """When act last planned the cluster in full and found nothing to do, while the
        passes since found the plan's inputs unchanged and did not plan again (None: its
        last pass planned in full and had something to do, or none yet)."""
        try:
            status = self.status
        except ClusterStatus.DoesNotExist:
            return None
        return status.idle_planned_at if status.idle_inputs else None

    @property
    def has_kubeconfig(self) -> bool:
        return bool(self.kubeconfig)

    @property
    def kube_tls_insecure(self) -> bool:
        """Whether the stored kubeconfig skips the check of the API server's certificate
        (`insecure-skip-tls-verify: true`, which the account's admin allowed)."""
        if not self.kubeconfig:
            return False
        try:
            return kubeconfig_load(self.kubeconfig).insecure
        except KubeconfigInvalid:
            return False

    @property
    def imported(self) -> bool:
        return bool(self.imported_from)

    def deleting_refusal(self) -> str | None:
        """Why its pools may not be added, scaled or changed: the cluster is being deleted,
        and its teardown would drop the change unseen. None while it is active."""
        if self.state == Cluster.State.ACTIVE:
            return None
        return (
            f"Cluster {self.name} is being deleted (state {self.state}): its pools are torn "
            "down with it and cannot be added, scaled or changed."
        )

    def import_refusal(self) -> str | None:
        """Why a person may not change or delete this cluster or what belongs to it (its
        sites and pools); None when they may."""
        if not self.imported_from:
            return None
        return IMPORTED_READ_ONLY.format(
            what=f"Cluster {self.name}", source=f"Cluster {self.imported_from}"
        )

    def clean(self) -> None:
        if self.kubeconfig:
            try:
                allowed = self.account_id is not None and self.account.kube_insecure_tls_allowed
                kubeconfig_checked(self.kubeconfig, insecure_allowed=allowed)
            except KubeconfigInvalid as exc:
                raise ValidationError({"kubeconfig": str(exc)}) from exc
        # VM and vGPU names carry the cluster name: they must read as this cluster's only
        # (see gpus.naming), against every cluster of the whitesky customer, deleting ones
        # too.
        if self.pk and Cluster.objects.filter(pk=self.pk).exclude(name=self.name).exists():
            raise ValidationError(
                {
                    "name": conflict(
                        "A cluster's name cannot change: its VM and vGPU names carry it."
                    )
                }
            )
        if self.account_id and (
            taken := cluster_name_refusal(self.name, self.account_id, exclude=self.pk)
        ):
            raise ValidationError({"name": conflict(taken)})


class ClusterStatus(models.Model):
    """What act found of a cluster: written by act alone (clusters.reconcile), beside the
    cluster's row, which holds what people (and the CAPI import) asked for. Made when act
    first has something to say; no row: nothing yet."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, primary_key=True, related_name="status"
    )
    deletion_blockers = models.JSONField(
        default=list, blank=True, help_text="While deleting: what still exists."
    )
    # The last plan computed in full that had nothing to do, and what it read: a pass
    # whose inputs are the same (clusters.plan.plan_inputs) does not plan again, until
    # idle_until (the first time that plan compared with the clock) or the resync.
    idle_inputs = models.CharField(
        max_length=64, blank=True, help_text="The fingerprint of the inputs of that plan"
    )
    idle_planned_at = models.DateTimeField(
        null=True, blank=True, help_text="When the plan was last computed in full and was empty"
    )
    idle_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="That plan's first clock deadline (a machine's next try): planned in full after",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "cluster statuses"

    def __str__(self) -> str:
        return f"status of {self.cluster_id}"


def _moves(obj: models.Model, fields: list[str], message: str) -> dict[str, str | ValidationError]:
    """The fields of a saved row that differ from the stored row, each with `message` (a
    conflict with the stored row): where a row lives is fixed at its creation."""
    if obj.pk is None:
        return {}
    attnames = {name: getattr(obj._meta.get_field(name), "attname") for name in fields}  # noqa: B009
    stored = type(obj)._default_manager.filter(pk=obj.pk).values(*attnames.values()).first()
    if stored is None:
        return {}
    return {
        name: conflict(message)
        for name, attname in attnames.items()
        if stored[attname] != getattr(obj, attname)
    }


class ClusterSite(models.Model):
    """Where a cluster runs in one location: its cloudspace and the image of its VMs."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="sites")
    location = models.ForeignKey(Location, on_delete=models.PROTECT, related_name="sites")
    cloudspace_id = models.CharField(max_length=100, validators=[visible_text])
    image_id = models.PositiveIntegerField(validators=[MaxValueValidator(MAX_INT32)])
    observation_error = models.TextField(
        blank=True,
        help_text="Why the last observation could not list the VMs of this cloudspace; while "
        "set, nothing is decided about the site's VMs.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "location"], name="one_site_per_location"),
            models.CheckConstraint(
                condition=models.Q(image_id__lte=MAX_INT32), name="site_image_id_bounded"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} in {self.location}"

    def import_refusal(self) -> str | None:
        """Why a person may not change or delete this site (its cluster is imported)."""
        return self.cluster.import_refusal() if self.cluster_id else None

    def clean(self) -> None:
        errors = _moves(
            self,
            ["cluster", "location", "cloudspace_id"],
            "A site cannot move: its VMs live in its cloudspace. Add a new site instead.",
        )
        if (
            not errors
            and self.location_id
            and self.cluster_id
            and self.location.account_id != self.cluster.account_id
        ):
            errors["location"] = conflict(
                "The location belongs to another account than the cluster."
            )
        if errors:
            raise ValidationError(errors)


@deconstructible
class ReplicasBound(MaxValueValidator):
    """A pool's replicas at most settings.POOL_MAX_REPLICAS, read each time it is checked
    (so the setting is not frozen into a migration). A MaxValueValidator, so the API's
    serializers and the schema take the bound from it as from any other."""

    def __init__(self) -> None:
        pass  # no limit of its own: the setting's

    @property
    def limit_value(self) -> int:
        return int(settings.POOL_MAX_REPLICAS)


replicas_bound = ReplicasBound()


class MachinePool(models.Model):
    """A set of identical machines in one site; GPUs are asked for by type, never by id."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools")
    site = models.ForeignKey(ClusterSite, on_delete=models.PROTECT, related_name="pools")
    name = models.CharField(max_length=20, validators=[dns_label])
    replicas = models.PositiveSmallIntegerField(default=1, validators=[replicas_bound])
    vcpus = models.PositiveSmallIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(MAX_VCPUS)]
    )
    memory_mib = models.PositiveIntegerField(
        default=8192,
        validators=[MinValueValidator(MIN_MEMORY_MIB), MaxValueValidator(MAX_MEMORY_MIB)],
    )
    disk_gib = models.PositiveIntegerField(
        default=50, validators=[MinValueValidator(MIN_DISK_GIB), MaxValueValidator(MAX_DISK_GIB)]
    )
    user_data = models.TextField(
        blank=True,
        validators=[
            MaxLengthValidator(
                MAX_USER_DATA_LENGTH,
                f"User data is at most {MAX_USER_DATA_LENGTH:,} characters (this has "
                "%(show_value)s).",
            )
        ],
        help_text="cloud-init user data of its VMs (at most 65,536 characters); audited as "
        "its size and digest only.",
    )
    gpu_type = models.CharField(
        max_length=100,
        blank=True,
        validators=[visible_text],
        help_text='e.g. "NVIDIA A100"; resolved per location',
    )
    gpu_profile_id = models.CharField(
        max_length=100,
        blank=True,
        validators=[visible_text],
        help_text="Escape hatch: one exact GPU profile (card) id",
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
    imported_from = models.CharField(
        max_length=300,
        blank=True,
        editable=False,
        help_text="The Cluster API MachineDeployment it is a generation of (<namespace>/<name>).",
    )
    import_generation = models.PositiveSmallIntegerField(
        default=0,
        editable=False,
        help_text="Imported: which template of its MachineDeployment it runs (1, 2, ...); "
        "a template change makes the next generation.",
    )
    capi_sriov_secret_ref = models.CharField(
        max_length=300,
        blank=True,
        editable=False,
        help_text="Imported: spec.sriov.credentialSecretRef of its VCOMachineTemplate "
        "(<namespace>/<name>), recorded only.",
    )
    autoscale_enabled = models.BooleanField(
        default=False,
        help_text="Let the pool follow its GPU pods between its bounds: the autoscaler "
        "decides its machines (its replicas are then not set by hand).",
    )
    autoscale_min = models.PositiveSmallIntegerField(
        default=0, validators=[replicas_bound], help_text="Autoscale: never fewer machines"
    )
    autoscale_max = models.PositiveSmallIntegerField(
        default=0, validators=[replicas_bound], help_text="Autoscale: never more machines"
    )
    gpu_fit_refusal = models.TextField(
        blank=True,
        editable=False,
        help_text="Imported: why its GPUs can never fit in its location (its condition "
        "GpuFits is False); while set, no machine is made for it. A pool made here that "
        "cannot fit is refused instead.",
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
            models.CheckConstraint(
                condition=models.Q(replicas__lte=MAX_REPLICAS),
                name="pool_replicas_bounded",
            ),
            models.CheckConstraint(
                condition=models.Q(autoscale_enabled=False)
                | models.Q(
                    autoscale_min__lte=models.F("autoscale_max"),
                    autoscale_max__gte=1,
                    autoscale_max__lte=MAX_REPLICAS,
                    gpu_count__gte=1,
                ),
                name="pool_autoscale_bounds",
            ),
            models.CheckConstraint(
                condition=models.Q(vcpus__gte=1, vcpus__lte=MAX_VCPUS),
                name="pool_vcpus_bounded",
            ),
            models.CheckConstraint(
                condition=models.Q(memory_mib__gte=MIN_MEMORY_MIB, memory_mib__lte=MAX_MEMORY_MIB),
                name="pool_memory_bounded",
            ),
            models.CheckConstraint(
                condition=models.Q(disk_gib__gte=MIN_DISK_GIB, disk_gib__lte=MAX_DISK_GIB),
                name="pool_disk_bounded",
            ),
        ]
        permissions = [("scale_machinepool", "Can scale machine pool (replicas only)")]

    # What audit records show of these: a size and a digest, not the text (capvco_web.audit).
    audit_digested = frozenset({"user_data"})

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            with transaction.atomic():
                names_lock()  # clean() checked without it; checked again here, under it
                if name_error := self._name_error():
                    raise ValidationError({"name": conflict(name_error)})
                super().save(*args, **kwargs)
            return
        # `next_index` moves only in machine_create, under the row's lock. An edit (API,
        # admin) saves a copy read before: writing it back would wind the index back, and
        # the next machine would take the name of one that exists or existed.
        if kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                f.name
                for f in self._meta.concrete_fields
                if not f.primary_key and f.name != "next_index"
            ]
        super().save(*args, **kwargs)

    def clean(self) -> None:
        errors = _moves(
            self,
            ["cluster", "site"],
            "A pool cannot move: its machines live in its site. Add a new pool instead.",
        )
        if self.gpu_count and not (self.gpu_type.strip() or self.gpu_profile_id.strip()):
            errors["gpu_type"] = "A pool with GPUs needs a GPU type (or a profile id)."
        if refusal := self.autoscale_refusal():
            errors["autoscale_enabled"] = refusal
        if not self.gpu_count and (self.gpu_type or self.gpu_profile_id):
            errors["gpu_count"] = f"Give a GPU count from 1 to {MAX_GPUS_PER_MACHINE}."
        if (
            "site" not in errors
            and self.site_id
            and self.cluster_id
            and self.site.cluster_id != self.cluster_id
        ):
            errors["site"] = conflict("The site (location) does not belong to this cluster.")
        if name_error := self._name_error():
            errors["name"] = conflict(name_error)
        if errors:
            raise ValidationError(errors)
        if self.cluster_id and (refusal := self.cluster.deleting_refusal()):
            raise conflict(refusal)
        # Imported pools are what the management cluster declares: the import records the
        # same refusal as their condition instead (clusters.capi_import).
        if self.site_id and not self.imported_from and self._gpus_changed():
            fit = location_fit_refusal(
                self.site.location,
                count=self.gpu_count,
                gpu_type=self.gpu_type,
                profile_id=self.gpu_profile_id,
            )
            if fit is not None:
                message = conflict(fit.message) if fit.waits else fit.message
                raise ValidationError({fit.field: message})

    def _gpus_changed(self) -> bool:
        """Whether its GPUs are new or asked for anew: a change of anything else (a size,
        user data) is no reason to judge them again."""
        fields = ("gpu_type", "gpu_profile_id", "gpu_count")
        stored = MachinePool.objects.filter(pk=self.pk).values(*fields).first() if self.pk else None
        return stored is None or any(stored[f] != getattr(self, f) for f in fields)

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

    def autoscale_refusal(self) -> str | None:
        """Why these autoscale bounds cannot be (None: they can, or autoscale is off)."""
        if not self.autoscale_enabled:
            return None
        if not self.gpu_count:
            return "Autoscale follows GPU pods: only a pool with GPUs can autoscale."
        if self.imported_from:
            return (
                "An imported pool's replicas follow its MachineDeployment: it cannot autoscale "
                "here."
            )
        if not 1 <= self.autoscale_max <= MAX_REPLICAS:
            return f"Give an autoscale max from 1 to {MAX_REPLICAS}."
        if self.autoscale_min > self.autoscale_max:
            return (
                f"The autoscale min ({self.autoscale_min}) is above its max ({self.autoscale_max})."
            )
        return None

    @property
    def effective_replicas(self) -> int:
        """The machines the pool is to have: its replicas, or, with autoscale on, what the
        autoscaler decided (its PoolTarget; the replicas until it decides), within the
        bounds as they are now."""
        if not self.autoscale_enabled:
            return self.replicas
        decided = self.decided.replicas if self.decided is not None else self.replicas
        return min(max(decided, self.autoscale_min), self.autoscale_max)

    @property
    def decided(self) -> PoolTarget | None:
        """The autoscaler's last decision for the pool (None: none yet). A list reads it
        with select_related("target")."""
        try:
            return self.target
        except PoolTarget.DoesNotExist:
            return None

    @property
    def conditions(self) -> list[dict[str, str]]:
        """Imported pools: whether their GPUs can ever fit, as a Kubernetes condition."""
        if not self.imported_from:
            return []
        if self.gpu_fit_refusal:
            return [
                {"type": "GpuFits", "status": "False", "reason": "GpuNeverFits",
                 "message": self.gpu_fit_refusal}
            ]  # fmt: skip
        return [{"type": "GpuFits", "status": "True", "reason": "GpuFits", "message": ""}]

    def machine_spec(self) -> dict[str, str | int]:
        """What its machines are made with now (SPEC_FIELDS)."""
        return {name: getattr(self, name) for name in SPEC_FIELDS}

    def import_refusal(self) -> str | None:
        """Why a person may not change, scale or delete this pool, or add one to its
        cluster: the cluster is imported (the pool's MachineDeployment decides)."""
        if not self.cluster_id or not self.cluster.imported_from:
            return None
        if not self.imported_from:
            return self.cluster.import_refusal()
        return IMPORTED_READ_ONLY.format(
            what=f"Pool {self.name}", source=f"MachineDeployment {self.imported_from}"
        )


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
    spec = models.JSONField(
        default=dict,
        blank=True,
        help_text="What its VM was created with, from its pool (GPU type, profile and count, "
        "vCPUs, memory, disk); empty: no VM created yet. A machine whose spec differs from "
        "its pool's is replaced, one machine of the pool at a time.",
    )
    vm_started_at = models.DateTimeField(
        null=True, blank=True, help_text="When its VM was last started (running since)"
    )
    phase = models.CharField(max_length=16, choices=Phase, default=Phase.PENDING)
    failure_message = models.TextField(blank=True)
    delete_requested = models.BooleanField(
        default=False,
        help_text="Its teardown is taken up: set by act when it carries out the plan's "
        "teardown or replacement (a person's request is a MachineDeletion)",
    )
    failures = models.PositiveIntegerField(
        default=0, help_text="Failed tries in a row; reset when the machine runs"
    )
    next_try_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A failed machine is tried again from this moment (exponential backoff: "
        "MACHINE_RETRY_BASE_SECONDS doubled per failure, up to MACHINE_RETRY_MAX_SECONDS)",
    )
    capacity_wait_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when it waits for capacity without a break; empty: it does not wait",
    )
    capacity_stuck_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a look found it still waiting MACHINE_CAPACITY_STUCK_SECONDS after "
        "its wait began: flagged stuck, its message naming what the location offers",
    )
    gpu_card_refused = models.CharField(
        max_length=100,
        blank=True,
        help_text="The card whitesky last refused a reserve on for lack of room",
    )
    gpu_card_refused_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When: until a listing begun later says otherwise, plans count that card full",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pool", "index"], name="machine_index_unique_per_pool"),
        ]
        indexes = [
            # The few stuck machines, read by every notify pass and /metrics scrape.
            models.Index(
                fields=["pool"],
                name="machine_capacity_stuck",
                condition=Q(capacity_stuck_since__isnull=False),
            ),
        ]
        permissions = [
            ("force_delete_machine", "Can force delete machine (no teardown, leaves orphans)")
        ]

    def __str__(self) -> str:
        return f"{self.pool.cluster.name}/{self.name}"

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        # Its row is locked before the rows naming it are cleared: an observation holding
        # the machine (VmOwners) is waited for, and the reservations it wrote are cleared
        # too. Cleared first, the two would each wait for the other's rows (a deadlock).
        with transaction.atomic():
            list(Machine.objects.select_for_update().filter(pk=self.pk).values_list("pk"))
            return super().delete(*args, **kwargs)

    @property
    def vm_name(self) -> str:
        return naming.vm_name(self.pool.cluster.name, self.name)

    @property
    def deletion_asked(self) -> bool:
        """A person asked for its deletion (MachineDeletion), or act took its teardown up.
        A list reads it with select_related("deletion")."""
        if self.delete_requested:
            return True
        try:
            return self.deletion is not None
        except MachineDeletion.DoesNotExist:
            return False

    @property
    def drain_now(self) -> MachineDrain | None:
        """Its way out as the autoscaler records it (None: not unneeded). A list reads it
        with select_related("drain")."""
        try:
            return self.drain
        except MachineDrain.DoesNotExist:
            return None

    @property
    def waiting_for_capacity(self) -> bool:
        """No card of its type has room for its GPUs now; it is tried again after its
        backoff (`failure_message` says what is free)."""
        return self.phase != Machine.Phase.FAILED and self.failure_message.startswith(CAPACITY_WAIT)

    def vgpu_name(self, n: int) -> str:
        return naming.vgpu_name(self.pool.cluster.name, self.name, n)

    def spec_changes(self) -> list[str]:
        """How its pool's spec differs from the one its VM was made with ("gpu_type A ->
        B"); none when it is as the pool asks, or when it has no VM that could differ."""
        if not self.spec or (self.vm_id is None and self.vm_create_deadline is None):
            return []
        now = self.pool.machine_spec()
        return [
            f"{name} {_spec_shown(self.spec.get(name))} -> {_spec_shown(now[name])}"
            for name in SPEC_FIELDS
            if self.spec.get(name) != now[name]
        ]


class MachineDeletion(models.Model):
    """A person's request that a machine be torn down: what they asked, written by
    clusters.services alone. The machine's row is act's (act makes it at the index the plan
    chose, writes how far it got, and drops it once torn down); the plan reads this request
    and act takes it up (Machine.delete_requested), so a request never races act's writes
    to the machine's row."""

    machine = models.OneToOneField(
        Machine, on_delete=models.CASCADE, primary_key=True, related_name="deletion"
    )
    requested_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    reason = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"deletion of machine {self.machine_id}"


def _spec_shown(value: object) -> str:
    return "(none)" if value in ("", None) else str(value)


class VmRemovalRequest(models.Model):
    """A removal of a VM that no machine owns, as we decided it: a person's request,
    recorded before any worker acts on it so that a lost task message or a killed worker
    cannot lose it (the orphan sweep carries out what is still open), or the sweep's own
    (`requested_by` empty), recorded when done. The VM row is what whitesky lists, written
    only by observe; this row is ours, written only by the request and the step that
    carries it out."""

    location = models.ForeignKey(
        Location, on_delete=models.CASCADE, related_name="vm_removal_requests"
    )
    vm_id = models.BigIntegerField()
    name = models.CharField(max_length=200)
    cloudspace_id = models.CharField(max_length=100)
    requested_by = models.ForeignKey(
        "auth.User", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    reason = models.TextField()
    attempted_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="Why the last attempt was refused")
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "vm_id"],
                condition=models.Q(done_at__isnull=True),
                name="one_open_vm_removal_per_vm",
            )
        ]

    def __str__(self) -> str:
        return f"removal of {self.name} ({self.vm_id})"


class PoolTarget(models.Model):
    """The machines the autoscaler decided for a pool with autoscale on, and why. Its one
    writer is the autoscaler (autoscale.reconcile); people own the pool's bounds and its
    replicas (which count only while autoscale is off)."""

    pool = models.OneToOneField(MachinePool, on_delete=models.CASCADE, related_name="target")
    replicas = models.PositiveSmallIntegerField()
    reason = models.CharField(max_length=500)
    decided_at = models.DateTimeField()
    scaled_up_at = models.DateTimeField(
        null=True, blank=True, help_text="Its last growth: no scale-down within a delay of it"
    )

    def __str__(self) -> str:
        return f"{self.pool}: {self.replicas}"


class MachineDrain(models.Model):
    """A machine whose GPUs no pod requests, on its way out (the autoscaler's, its one
    writer): unneeded since a time, then cordoned and drained, then drained, when its
    pool's target is lowered by one and the plan tears this machine down first. A pod that
    wants its GPUs before that deletes the row (and uncordons the node)."""

    class Phase(models.TextChoices):
        UNNEEDED = "unneeded"
        DRAINING = "draining"
        DRAINED = "drained"

    machine = models.OneToOneField(Machine, on_delete=models.CASCADE, related_name="drain")
    node_name = models.CharField(max_length=253)
    phase = models.CharField(max_length=16, choices=Phase, default=Phase.UNNEEDED)
    unneeded_since = models.DateTimeField()
    drain_started_at = models.DateTimeField(null=True, blank=True)
    drained_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.machine}: {self.phase}"
