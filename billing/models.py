"""Money over time: hourly and daily rollups of what things cost and of GPU capacity, the
ledger of leaks, and the checks of whitesky's bill against what we own.

History outlives what it is about: a rollup keeps a deleted cluster's and pool's id and
name as plain values, not as foreign keys, so a month's cost stays whole after a teardown.
Every figure is in its location's currency; two currencies are never added.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import models
from django.utils import timezone

from gpus.models import hourly_price, hours_between


def amount(help_text: str = "") -> models.DecimalField[Decimal, Decimal]:
    """A sum of money in the row's currency, to the micro-unit (an hour of a cent a month
    is 0.0000137)."""
    return models.DecimalField(
        max_digits=16, decimal_places=6, default=Decimal(0), help_text=help_text
    )


class Step(models.TextChoices):
    """How long a rollup row covers: an hour (one sample), a day (its hours summed), or a
    month (its summed days summed: written again with each day summed in it)."""

    HOUR = "hour"
    DAY = "day"
    MONTH = "month"


class Rollup(models.Model):
    """That a step's rollup was taken: its rows and this marker are written together, so
    a pass that finds the marker writes nothing."""

    step = models.CharField(max_length=8, choices=Step)
    start = models.DateTimeField()
    taken_at = models.DateTimeField()
    samples = models.PositiveSmallIntegerField(
        default=1,
        help_text="Hours sampled: 1 for an hour; a day's summed hours (kept after they go)",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "start"], name="rollup_taken_once")]

    def __str__(self) -> str:
        return f"{self.step} {self.start:%Y-%m-%d %H:%M}"


class CostRollup(models.Model):
    """What one pool, one namespace's share of a cluster's GPUs, or one location (its pools summed;
    its orphans are the leak ledger's) cost over a step (an hour: the hourly rate sampled in
    it; a day: its hours summed)."""

    class Kind(models.TextChoices):
        POOL = "pool"  # compute, vgpu, idle of a pool's machines
        NAMESPACE = "namespace"  # a namespace's share of the GPU nodes' vGPUs; null: idle
        # A location's pools summed: what an account or a location's machines cost, read
        # without its pools (its orphans are the leak ledger's).
        LOCATION = "location"

    step = models.CharField(max_length=8, choices=Step)
    start = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=Kind)
    account = models.ForeignKey(
        "cloud.Account", on_delete=models.CASCADE, related_name="cost_rollups"
    )
    location = models.ForeignKey(
        "cloud.Location",
        on_delete=models.CASCADE,
        related_name="cost_rollups",
        db_index=False,  # cost_rollup_where leads with it
    )
    currency = models.CharField(max_length=8, blank=True)
    cluster_id = models.BigIntegerField(null=True, blank=True)
    cluster_name = models.CharField(max_length=64, blank=True)
    pool_id = models.BigIntegerField(null=True, blank=True)
    pool_name = models.CharField(max_length=64, blank=True)
    namespace = models.CharField(max_length=253, null=True, blank=True)  # noqa: DJ001
    samples = models.PositiveSmallIntegerField(
        default=1, help_text="Hourly samples summed in the row (24 for a whole day)"
    )
    machines = models.PositiveIntegerField(default=0, help_text="Machine-hours")
    compute = amount()
    vgpu = amount()
    idle = amount("Part of vgpu")
    idle_gpus = models.PositiveIntegerField(default=0, help_text="Idle GPU-hours")

    class Meta:
        indexes = [
            models.Index(fields=["step", "start", "kind"], name="cost_rollup_when"),
            models.Index(fields=["cluster_id", "step", "start"], name="cost_rollup_cluster"),
            # A location's rows of a kind over a window (a location's page), read alone: a
            # location's id alone would match a tenth of the history to filter the rest by.
            models.Index(fields=["location", "step", "kind", "start"], name="cost_rollup_where"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.cluster_name or self.location_id} {self.step} {self.start}"

    @property
    def total(self) -> Decimal:
        # idle is part of vgpu; a namespace row's vgpu is a share of its pools' vgpu.
        return self.compute + self.vgpu


class LabelCostRollup(models.Model):
    """The pods of one cluster that carry one set of labels (exactly these, whatever their
    namespace): the GPUs they requested on its GPU nodes in one location and their share of
    those nodes' attached vGPUs, over a step (an hour: the sample taken in it, beside the
    namespace rows of the same sample; a day: its hours summed; a month: its days summed,
    as CostRollup's). Pods are summed by label
    set, so any label key can be asked later (billing.selectors.cost_by_label_over); the
    idle GPUs are the namespace rows' (CostRollup, namespace null)."""

    step = models.CharField(max_length=8, choices=Step)
    start = models.DateTimeField()
    account = models.ForeignKey(
        "cloud.Account", on_delete=models.CASCADE, related_name="label_cost_rollups"
    )
    location = models.ForeignKey(
        "cloud.Location", on_delete=models.CASCADE, related_name="label_cost_rollups"
    )
    currency = models.CharField(max_length=8, blank=True)
    cluster_id = models.BigIntegerField()
    labels = models.JSONField(
        default=dict, blank=True, help_text="The pods' labels, keys sorted ({}: none)"
    )
    gpus = models.PositiveIntegerField(default=0, help_text="GPU-hours its pods requested")
    vgpu = amount("Its pods' share of the nodes' attached vGPUs")

    class Meta:
        indexes = [
            models.Index(fields=["step", "start"], name="label_cost_rollup_when"),
            models.Index(fields=["cluster_id", "step", "start"], name="label_cost_rollup_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.labels} {self.step} {self.start}"


class CapacityRollup(models.Model):
    """GPUs of one type in one location over a step: each figure summed over the step's
    hourly samples (divide by `samples` for the mean)."""

    step = models.CharField(max_length=8, choices=Step)
    start = models.DateTimeField()
    location = models.ForeignKey(
        "cloud.Location",
        on_delete=models.CASCADE,
        related_name="capacity_rollups",
        db_index=False,  # capacity_rollup_where leads with it
    )
    gpu_type = models.CharField(max_length=200)
    samples = models.PositiveSmallIntegerField(default=1)
    free = models.PositiveIntegerField(default=0)
    reserved = models.PositiveIntegerField(default=0, help_text="Billed, on no VM")
    attached = models.PositiveIntegerField(default=0)
    allocatable = models.PositiveIntegerField(default=0, help_text="As Kubernetes nodes say")
    requested = models.PositiveIntegerField(default=0, help_text="By pending and running pods")

    class Meta:
        indexes = [
            models.Index(fields=["step", "start"], name="capacity_rollup_when"),
            models.Index(fields=["location", "step", "start"], name="capacity_rollup_where"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_type} at {self.location_id} {self.step} {self.start}"


class Leak(models.Model):
    """A vGPU or VM that whitesky bills and no machine of ours owns: opened when complete
    listings first flag it orphaned, ended when it is released, gone or owned again. The
    record, and what it cost, stays after it ended."""

    class Kind(models.TextChoices):
        VGPU = "vgpu", "vGPU"
        VM = "vm", "VM"

    class End(models.TextChoices):
        RELEASED = "released"  # released by us (the sweep or a person)
        GONE = "gone"  # no longer in a complete listing
        OWNED = "owned"  # a machine owns it again

    account = models.ForeignKey("cloud.Account", on_delete=models.CASCADE, related_name="leaks")
    location = models.ForeignKey("cloud.Location", on_delete=models.CASCADE, related_name="leaks")
    kind = models.CharField(max_length=8, choices=Kind)
    external_id = models.CharField(max_length=100, help_text="The vGPU id, or the VM id")
    name = models.CharField(max_length=200)
    currency = models.CharField(max_length=8, blank=True)
    monthly_price = models.DecimalField(
        max_digits=14, decimal_places=4, help_text="What it is billed per month"
    )
    billed_since = models.DateTimeField(help_text="When whitesky first billed it, as we know")
    leaked_since = models.DateTimeField(help_text="Since when no machine owns it")
    ended_at = models.DateTimeField(null=True, blank=True)
    end = models.CharField(max_length=16, choices=End, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "kind", "external_id"],
                condition=models.Q(ended_at__isnull=True),
                name="leak_open_once",
            )
        ]
        indexes = [
            models.Index(fields=["account", "ended_at"], name="leak_account_ended"),
            models.Index(fields=["leaked_since"], name="leak_since"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def is_open(self) -> bool:
        return self.ended_at is None

    def counted_until(self) -> datetime:
        """Where what it cost stops: its end; while open, the start of its location's
        last complete observation (as far as it is known to leak), never past now. An
        ended leak never ends before that (billing.leaks), so its cost never goes down."""
        if self.ended_at is not None:
            return self.ended_at
        now = timezone.now()
        seen = self.location.last_complete_observation_at
        return now if seen is None else max(min(seen, now), self.leaked_since)

    def cost(self, *, since: datetime | None = None, until: datetime | None = None) -> Decimal:
        """What it cost while leaked, within [since, until) if given: the one figure of a
        leak's cost that the ledger, the bill check, the cost series, the metrics and the
        CSVs read."""
        start = max(self.leaked_since, since) if since else self.leaked_since
        end = self.counted_until()
        if until is not None:
            end = min(end, until)
        if end <= start:
            return Decimal(0)
        return hours_between(start, end) * hourly_price(self.monthly_price)

    def billed_cost(self) -> Decimal:
        """What it cost from first billed to its end (or as far as known), owned time
        included."""
        return max(hours_between(self.billed_since, self.counted_until()), Decimal(0)) * (
            hourly_price(self.monthly_price)
        )


class BillCheck(models.Model):
    """whitesky's consumption of one location over one hour, against what we own: what
    it billed, what our machines and known leaks explain, and the rest, "billed, not
    explained", with the objects behind it (BillItem)."""

    location = models.ForeignKey(
        "cloud.Location", on_delete=models.CASCADE, related_name="bill_checks"
    )
    start = models.DateTimeField()
    end = models.DateTimeField()
    checked_at = models.DateTimeField()
    currency = models.CharField(max_length=8, blank=True)
    billed = amount()
    owned = amount("Our machines' share")
    leaked = amount("Known leaks' share")
    unexplained = amount()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["location", "start"], name="bill_check_once")
        ]
        indexes = [models.Index(fields=["start"], name="bill_check_when")]

    def __str__(self) -> str:
        return f"{self.location_id} {self.start:%Y-%m-%d %H:%M}"


# The units a bill check prices (billing.bills.PRICED_UNITS), as a person reads them.
UNIT_NAMES = {"vcu": "vCPU-hours", "mu": "GiB-hours", "vgu": "vGPU-hours"}


class BillItem(models.Model):
    """One billed object of a check that no machine of ours explains."""

    class Verdict(models.TextChoices):
        LEAK = "leak", "a known leak (named by us, owned by no machine)"
        UNEXPLAINED = "unexplained", "billed, not explained"

    class Kind(models.TextChoices):
        VM = "vm", "VM"
        VGPU = "vgpu", "vGPU"

    bill = models.ForeignKey(BillCheck, on_delete=models.CASCADE, related_name="items")
    kind = models.CharField(max_length=8, choices=Kind)
    external_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200, blank=True)
    cloudspace_id = models.CharField(
        max_length=100, blank=True, help_text="Where whitesky billed the VM (a vGPU: empty)"
    )
    verdict = models.CharField(max_length=16, choices=Verdict)
    units = models.JSONField(
        default=dict, help_text="The unit-hours we price, as whitesky billed them (billing.bills)"
    )
    cost = amount("Its leaked part, or the part not explained")

    def __str__(self) -> str:
        return f"{self.kind} {self.external_id} ({self.verdict})"

    @property
    def units_shown(self) -> list[str]:
        """The units we price, named and rounded: "4.00 vCPU-hours"."""
        return [
            f"{Decimal(str(self.units[unit])).quantize(Decimal('0.01'))} {name}"
            for unit, name in UNIT_NAMES.items()
            if self.units.get(unit)
        ]


class IdleSpell(models.Model):
    """A GPU node whose attached vGPUs no pending or running pod requests (in part or all),
    and since when: opened by the money pass when it first sees the node idle in a complete
    Kubernetes observation, ended when a pod asks for its GPUs or it has none attached."""

    account = models.ForeignKey(
        "cloud.Account", on_delete=models.CASCADE, related_name="idle_spells"
    )
    location = models.ForeignKey(
        "cloud.Location", on_delete=models.CASCADE, related_name="idle_spells"
    )
    cluster_id = models.BigIntegerField()
    cluster_name = models.CharField(max_length=64)
    pool_id = models.BigIntegerField()
    machine_id = models.BigIntegerField()
    node_name = models.CharField(max_length=253)
    currency = models.CharField(max_length=8, blank=True)
    idle_gpus = models.PositiveIntegerField(help_text="As last seen")
    hourly = amount("What the idle vGPUs cost per hour, as last seen")
    since = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster_id", "machine_id"],
                condition=models.Q(ended_at__isnull=True),
                name="idle_spell_open_once",
            )
        ]
        indexes = [models.Index(fields=["ended_at", "since"], name="idle_spell_open")]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.node_name}: {self.idle_gpus} idle"

    @property
    def is_open(self) -> bool:
        return self.ended_at is None

    def cost(self, *, until: datetime | None = None) -> Decimal:
        """What its idle GPUs cost since it began, at the last seen rate."""
        end = self.ended_at or until or timezone.now()
        return max(hours_between(self.since, end), Decimal(0)) * self.hourly
