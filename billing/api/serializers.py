"""What the money endpoints answer: the cost per hour now, the cost per step over time,
the month to date with its forecast, and the leak ledger. Read-only."""

from __future__ import annotations

from rest_framework import serializers

from billing.models import IdleSpell, Leak
from billing.selectors import SERIES_STEPS


def _money(
    help_text: str, *, allow_null: bool = False, source: str | None = None
) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=20, decimal_places=4, allow_null=allow_null, help_text=help_text,
        source=source,
    )  # fmt: skip


class CostGroupSerializer(serializers.Serializer[object]):
    """Which group a figure is of: its account, and as the grouping asks, its location,
    cluster, pool or namespace; and its currency."""

    account = serializers.IntegerField()
    account_name = serializers.CharField()
    location = serializers.IntegerField(allow_null=True, help_text="group_by location or pool")
    location_name = serializers.CharField(allow_null=True)
    cluster = serializers.IntegerField(
        allow_null=True, help_text="group_by cluster, pool or namespace"
    )
    cluster_name = serializers.CharField(allow_null=True)
    pool = serializers.IntegerField(allow_null=True, help_text="group_by pool")
    pool_name = serializers.CharField(allow_null=True)
    namespace = serializers.CharField(
        allow_null=True,
        help_text="group_by namespace: the namespace whose pods request the GPUs; null on "
        "the row of a cluster's idle GPUs, which no pod requests",
    )
    currency = serializers.CharField()


class CostRowSerializer(CostGroupSerializer):
    """One group's cost per hour now, in one currency (two are never added). Disks, IOPS,
    public IPs and NICs are not counted (whitesky's VM listing does not carry disks or
    IOPS; its prices have no unit per NIC)."""

    machines = serializers.IntegerField(help_text="Machines counted (0 for namespaces)")
    compute = _money(
        "The machines' VMs' vCPUs and memory, per hour (null for namespaces: only GPUs are "
        "attributed)",
        allow_null=True,
    )
    vgpu = _money(
        "The machines' billed vGPUs, per hour; for a namespace its share of its nodes' "
        "attached vGPUs by request"
    )
    idle_gpus = serializers.IntegerField(
        help_text="vGPUs attached to nodes whose pending and running pods request fewer"
    )
    idle = _money("The part of vgpu that no pod requests, per hour")
    orphan_vgpu = _money(
        "Orphaned vGPUs, per hour (account and location only, else null)", allow_null=True
    )
    orphan_vm = _money(
        "Orphan VMs' vCPUs and memory, per hour (account and location only, else null)",
        allow_null=True,
    )
    total = _money("compute + vgpu + orphan_vgpu + orphan_vm, per hour")


class LabelCostRowSerializer(serializers.Serializer[object]):
    """One value of the label in one currency (two are never added): its pods' share of
    the cluster's GPU nodes' attached vGPUs by request; or the pods without the label; or
    the idle GPUs, which no pod requests (kept apart, never spread over the pods)."""

    currency = serializers.CharField()
    value = serializers.CharField(
        allow_null=True,
        help_text="The label's value; null on the row of the pods without the label and on "
        "the idle row",
    )
    name = serializers.CharField(
        help_text="As the page shows it: the value, (empty value), (no label) or (idle)"
    )
    idle = serializers.BooleanField(
        help_text="The row of the GPUs no pending or running pod requests"
    )
    gpus = serializers.IntegerField(
        help_text="GPUs its pending and running pods request; on the idle row, attached GPUs "
        "no pod requests"
    )
    vgpu = _money("Its share of what the nodes' attached vGPUs cost, per hour now")


class CostByLabelSerializer(serializers.Serializer[object]):
    """What a cluster's GPU nodes cost per hour now, by the value of one pod label."""

    key = serializers.CharField(help_text="The label key asked for")
    results = LabelCostRowSerializer(many=True)


class LabelCostTotalSerializer(serializers.Serializer[object]):
    """One value of the label in one currency over the window (two are never added): its
    pods' share of the cluster's GPU nodes' attached vGPUs, summed over the hours sampled;
    or the pods without the label; or the idle GPUs; or what the cluster cost besides."""

    currency = serializers.CharField()
    value = serializers.CharField(
        allow_null=True,
        help_text="The label's value; null on the rows of the pods without the label, of the "
        "idle GPUs and of the rest",
    )
    name = serializers.CharField(
        help_text="As the page shows it: the value, (empty value), (no label), (idle) or "
        "(not attributed)"
    )
    idle = serializers.BooleanField(
        help_text="The row of the GPUs no pending or running pod requested"
    )
    not_attributed = serializers.BooleanField(
        help_text="The row of what the cluster cost besides its GPU nodes' attached vGPUs "
        "(its machines' vCPUs and memory, billed vGPUs on no GPU node) and of the shares of "
        "hours sampled before label sets were kept: the rows add up to the cluster's cost"
    )
    gpu_hours = serializers.IntegerField(
        allow_null=True,
        help_text="GPUs its pending and running pods requested, summed over the hours "
        "sampled; on the idle row, attached GPUs no pod requested; null on the rest",
    )
    cost = _money("What it cost over the window")


class CostByLabelHistorySerializer(serializers.Serializer[object]):
    """What a cluster cost over [start, end), by the value of one pod label."""

    key = serializers.CharField(help_text="The label key asked for")
    start = serializers.DateTimeField(help_text="The window's start (UTC)")
    end = serializers.DateTimeField(help_text="The window's end (UTC, exclusive)")
    hours = serializers.IntegerField(help_text="Hours in the window")
    hours_sampled = serializers.IntegerField(
        help_text="Of those, the hours a rollup pass sampled (an hour not sampled adds nothing)"
    )
    results = LabelCostTotalSerializer(many=True, source="rows")


class CostPointSerializer(CostGroupSerializer):
    """What one group cost over one step, in one currency: the hourly rates sampled in the
    step's hours, summed (an amount, not a rate). An hour no rollup pass sampled adds
    nothing: compare `hours_sampled` with `hours`."""

    start = serializers.DateTimeField(help_text="The step's start (UTC)")
    hours = serializers.IntegerField(help_text="Hours in the step")
    hours_sampled = serializers.IntegerField(
        help_text="Of those, the hours a rollup pass sampled (every group of the step alike)"
    )
    machine_hours = serializers.IntegerField(
        source="machines", help_text="Machines counted, summed over the sampled hours"
    )
    compute = _money(
        "The machines' VMs' vCPUs and memory (null for namespaces: only GPUs are attributed)",
        allow_null=True,
    )
    vgpu = _money(
        "The machines' billed vGPUs; for a namespace its share of its nodes' attached vGPUs "
        "by request"
    )
    idle_gpu_hours = serializers.IntegerField(
        source="idle_gpus", help_text="Idle vGPUs, summed over the sampled hours"
    )
    idle = _money("The part of vgpu that no pod requested")
    orphan_vgpu = _money("Orphaned vGPUs (account and location only, else null)", allow_null=True)
    orphan_vm = _money(
        "Orphan VMs' vCPUs and memory (account and location only, else null)", allow_null=True
    )
    total = _money("compute + vgpu + orphan_vgpu + orphan_vm")


class CostSeriesSerializer(serializers.Serializer[object]):
    """What each group cost per step over [start, end), from the hourly rollups."""

    step = serializers.ChoiceField(choices=SERIES_STEPS)
    start = serializers.DateTimeField(help_text="The first step's start (UTC)")
    end = serializers.DateTimeField(help_text="The end of the last step (UTC, exclusive)")
    hours_sampled = serializers.IntegerField(
        help_text="The hours of the range a rollup pass sampled"
    )
    results = CostPointSerializer(many=True, source="points")


class MonthFigureSerializer(serializers.Serializer[object]):
    """One account's or cluster's month in one currency: spent so far, the rate now and the
    rate its pools' replicas imply, and where the month ends at that rate."""

    account = serializers.IntegerField(source="point.account")
    account_name = serializers.CharField(source="point.account_name")
    cluster = serializers.IntegerField(
        source="point.cluster", allow_null=True, help_text="group_by cluster"
    )
    cluster_name = serializers.CharField(source="point.cluster_name", allow_null=True)
    currency = serializers.CharField(source="point.currency")
    month_start = serializers.DateTimeField(help_text="The calendar month's start (UTC)")
    hours_sampled = serializers.IntegerField(
        help_text="Hours of the month so far that a rollup pass sampled"
    )
    hours_left = serializers.DecimalField(
        max_digits=10, decimal_places=2, help_text="The hours not sampled yet, to the month's end"
    )
    spent = _money("What the sampled hours cost, summed (month to date)", source="point.total")
    rate_now = _money("The cost per hour now")
    rate_planned = _money(
        "The cost per hour once every pool has its replicas (each missing or surplus "
        "machine at its pool's list price)"
    )
    forecast = _money("spent + rate_planned * hours_left: where the month ends")


class LeakSerializer(serializers.ModelSerializer[Leak]):
    """A vGPU or VM whitesky bills that no machine of ours owns, from flagged to ended, and
    what it cost; the record stays after it ended."""

    account_name = serializers.CharField(source="account.name", read_only=True)
    location_name = serializers.CharField(source="location.name", read_only=True)
    end = serializers.ChoiceField(
        choices=Leak.End.choices,
        allow_blank=True,
        read_only=True,
        help_text="How it ended; empty while it is open",
    )
    open = serializers.BooleanField(source="is_open", help_text="Not ended yet", read_only=True)
    cost = _money("What it cost while leaked, from leaked_since to its end (or now)")
    billed_cost = _money("What it cost from first billed to its end (or now), owned time too")

    class Meta:
        model = Leak
        fields = [
            "id", "account", "account_name", "location", "location_name", "kind",
            "external_id", "name", "currency", "monthly_price", "billed_since",
            "leaked_since", "ended_at", "end", "open", "cost", "billed_cost",
        ]  # fmt: skip
        read_only_fields = fields


class LeakTotalSerializer(serializers.Serializer[object]):
    """One account's leaks in one currency over the period."""

    account = serializers.IntegerField()
    account_name = serializers.CharField()
    currency = serializers.CharField()
    cost = serializers.DecimalField(
        max_digits=20, decimal_places=2, help_text="What leaks cost within the period"
    )
    open = serializers.IntegerField(help_text="Leaks still open")
    ended = serializers.IntegerField(help_text="Leaks that ended within the period")


class LeakSummarySerializer(serializers.Serializer[object]):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    totals = LeakTotalSerializer(many=True)


class IdleSpellSerializer(serializers.ModelSerializer[IdleSpell]):
    """A GPU node whose attached vGPUs no pending or running pod asks for (in part or all),
    since when, and what that cost; the record stays after it ended."""

    account_name = serializers.CharField(source="account.name", read_only=True)
    location_name = serializers.CharField(source="location.name", read_only=True)
    open = serializers.BooleanField(source="is_open", help_text="Still idle", read_only=True)
    hourly = _money("What its idle vGPUs cost per hour, as last seen")
    cost = _money("What its idle vGPUs cost since it began, to its end (or now)")

    class Meta:
        model = IdleSpell
        fields = [
            "id", "account", "account_name", "location", "location_name", "cluster_id",
            "cluster_name", "pool_id", "machine_id", "node_name", "currency", "idle_gpus",
            "hourly", "since", "ended_at", "open", "cost",
        ]  # fmt: skip
        read_only_fields = fields
