from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.validators import MaxLengthValidator
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from capvco_web.api import (
    HAS_TEXT,
    ModelCleanMixin,
    ReasonField,
    StrictInputMixin,
)
from capvco_web.models import PlanPass
from cloud.models import (
    VirtualMachine,
)
from clusters.models import (
    MAX_GPUS_PER_MACHINE,
    Cluster,
    ClusterSite,
    Machine,
    MachinePool,
    replicas_bound,
)
from clusters.plan import KINDS, planned_kinds
from clusters.selectors import HELD_VGPUS, machine_vgpus_held
from gpus import naming
from gpus.models import VgpuReservation, vm_hourly_cost


class VirtualMachineSerializer(serializers.ModelSerializer[VirtualMachine]):
    compute_monthly_price = serializers.DecimalField(
        max_digits=14,
        decimal_places=4,
        read_only=True,
        help_text="Its vCPUs and memory per month at the location's prices (disks not "
        "counted; vGPUs are reservations of their own)",
    )
    hourly_cost = serializers.SerializerMethodField(
        help_text="compute_monthly_price per hour (a month is 730 hours), as the money "
        "figures count it"
    )
    named_by_us = serializers.SerializerMethodField(
        help_text="Its name has our prefix. False, and held by no machine: made outside the "
        "control plane (`not_ours=true` lists those); only an admin removes one"
    )

    class Meta:
        model = VirtualMachine
        fields = [
            "id", "location", "cloudspace_id", "vm_id", "name", "status", "vcpus",
            "memory_mib", "orphaned_since", "orphan_confirmations", "orphan_reason",
            "compute_monthly_price", "hourly_cost", "named_by_us", "first_seen_at",
            "changed_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(
        serializers.DecimalField(max_digits=14, decimal_places=4, coerce_to_string=True)
    )
    def get_hourly_cost(self, vm: VirtualMachine) -> str:
        return str(vm_hourly_cost(vm))

    def get_named_by_us(self, vm: VirtualMachine) -> bool:
        return vm.name.startswith(naming.PREFIX)


class ClusterSiteSerializer(ModelCleanMixin):
    class Meta:
        model = ClusterSite
        fields = ["id", "cluster", "location", "cloudspace_id", "image_id"]


def _summary_figure(name: str, help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        source=f"summary_{name}", read_only=True, default=0, help_text=help_text
    )


class KubeSummarySerializer(serializers.Serializer[Cluster]):
    """The cluster's Kubernetes as last observed (zeros without a kubeconfig)."""

    nodes = _summary_figure("nodes", "Nodes")
    nodes_ready = _summary_figure("nodes_ready", "Nodes that are Ready")
    gpu_capacity = _summary_figure("gpu_capacity", "nvidia.com/gpu the nodes have")
    gpu_allocatable = _summary_figure(
        "gpu_allocatable", "nvidia.com/gpu the nodes advertise as allocatable"
    )
    gpu_requested = _summary_figure(
        "gpu_requested", "nvidia.com/gpu requested by pending and running pods on a node"
    )
    gpu_unscheduled = _summary_figure(
        "gpu_unscheduled", "nvidia.com/gpu requested by pods not scheduled on a node yet"
    )
    nodes_unowned = _summary_figure("nodes_unowned", "Nodes no machine owns")
    nodes_gpus_missing = _summary_figure(
        "nodes_gpus_missing", "GPU nodes that advertise no nvidia.com/gpu"
    )
    machines_node_missing = _summary_figure(
        "machines_node_missing", "Running machines whose node never joined or left"
    )


class ClusterSerializer(ModelCleanMixin):
    sites = ClusterSiteSerializer(many=True, read_only=True)
    kubeconfig = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        style={"base_template": "textarea.html"},
        help_text="The workload cluster's kubeconfig (YAML); its nodes and pods are observed "
        "with it. Stored encrypted, never returned.",
    )
    has_kubeconfig = serializers.BooleanField(read_only=True)
    # Act's, from its own row (ClusterStatus).
    deletion_blockers = serializers.JSONField(
        read_only=True, help_text="While deleting: what still exists."
    )
    plan_unchanged_since = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When its plan was last computed in full and had nothing to do; the passes "
        "since found what it reads unchanged and did not plan again. Null: its last pass "
        "planned in full.",
    )
    # How its Kubernetes and GPU add-on were observed: the kube app's rows beside it.
    kube_observation_complete = serializers.BooleanField(
        source="kube_observation.complete",
        read_only=True,
        help_text="Whether the last observation listed every node and pod. Nothing is "
        "judged gone, and no node or machine is flagged, from a partial one.",
    )
    kube_observation_error = serializers.CharField(source="kube_observation.error", read_only=True)
    kube_observation_started_at = serializers.DateTimeField(
        source="kube_observation.started_at",
        read_only=True,
        allow_null=True,
        help_text="When the listings of the last observation began.",
    )
    kubernetes = KubeSummarySerializer(source="*", read_only=True)
    gpu_addon_applied_at = serializers.DateTimeField(
        source="gpu_addon_state.applied_at",
        read_only=True,
        allow_null=True,
        help_text="Since when the add-on, as it is now, is in the cluster.",
    )
    gpu_addon_error = serializers.CharField(source="gpu_addon_state.error", read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id", "name", "account", "state", "deletion_blockers", "plan_unchanged_since",
            "created_at", "sites",
            "kubeconfig", "has_kubeconfig", "kube_observation_complete",
            "kube_observation_error", "kube_observation_started_at", "kubernetes",
            "gpu_addon", "gpu_addon_applied_at", "gpu_addon_error", "imported_from",
        ]  # fmt: skip
        # The name rule is the model's (clean): one name per account is only the part the
        # database holds, and its generic "must make a unique set" would say less.
        validators: list[Any] = []
        read_only_fields = [
            "state", "deletion_blockers", "plan_unchanged_since", "created_at", "imported_from",
        ]  # fmt: skip

    def to_representation(self, instance: Cluster) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        # Not observed yet, nothing of the add-on recorded: as before they had rows.
        data["kube_observation_complete"] = bool(data["kube_observation_complete"])
        data["kube_observation_error"] = data["kube_observation_error"] or ""
        data["gpu_addon_error"] = data["gpu_addon_error"] or ""
        return data


class GpuAddonSerializer(StrictInputMixin, serializers.Serializer[Cluster]):
    """The GPU add-on on or off; the change is audited with the reason."""

    enabled = serializers.BooleanField()
    reason = ReasonField(required=False, allow_blank=True, default="")


class KubeconfigSerializer(StrictInputMixin, serializers.Serializer[Cluster]):
    """A new kubeconfig for a cluster; the change is audited (its server, never its secret)."""

    kubeconfig = serializers.CharField(
        write_only=True, trim_whitespace=True, style={"base_template": "textarea.html"}
    )
    reason = ReasonField(required=False, allow_blank=True, default="")


def _gpu_field(model_field: str) -> serializers.CharField:
    """A string of the `gpu` object, bounded and validated as the pool's own field, so that
    its schema states the model's limits too."""
    field = MachinePool._meta.get_field(model_field)
    assert isinstance(field, models.CharField)
    return serializers.CharField(
        source=model_field,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        max_length=field.max_length,
        # max_length adds its own: the model's would say the same twice.
        validators=[v for v in field.validators if not isinstance(v, MaxLengthValidator)],
    )


def _has_text(field: str) -> dict[str, Any]:
    return {"required": [field], "properties": {field: {"pattern": HAS_TEXT}}}


class PoolGpuSerializer(StrictInputMixin, serializers.Serializer[MachinePool]):
    """`gpu: {type, profileId, count, driverVersion}`: what a pool asks for, by type.
    No GPU: count 0 (or left out) and neither type nor profile id. GPUs: a count of 1 to
    8, and a type or a profile id. Taken whole, on PATCH too: what it leaves out is
    reset to its default."""

    type = _gpu_field("gpu_type")
    profileId = _gpu_field("gpu_profile_id")
    count = serializers.IntegerField(
        source="gpu_count", min_value=0, max_value=MAX_GPUS_PER_MACHINE, default=0
    )
    driverVersion = _gpu_field("gpu_driver_version")

    schema_rules = {
        "anyOf": [
            {
                "properties": {
                    "count": {"type": "integer", "enum": [0]},
                    "type": {"maxLength": 0},
                    "profileId": {"maxLength": 0},
                }
            },
            {
                "required": ["count"],
                "properties": {"count": {"minimum": 1}},
                "anyOf": [_has_text("type"), _has_text("profileId")],
            },
        ]
    }

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            data = {"type": "", "profileId": "", "count": 0, "driverVersion": "", **data}
        return super().to_internal_value(data)


class PoolAutoscaleSerializer(StrictInputMixin, serializers.Serializer[MachinePool]):
    """`autoscale: {enabled, min, max}`: the bounds people set; within them the autoscaler
    decides the machines (`replicas`, with its `reason`), and the pool's own replicas
    cannot be set while it is on. Taken whole, on PATCH too."""

    enabled = serializers.BooleanField(source="autoscale_enabled", default=False)
    min = serializers.IntegerField(
        source="autoscale_min", min_value=0, validators=[replicas_bound], default=0
    )
    max = serializers.IntegerField(
        source="autoscale_max", min_value=0, validators=[replicas_bound], default=0
    )
    replicas = serializers.IntegerField(
        source="effective_replicas",
        read_only=True,
        help_text="The machines the pool is to have now: with autoscale on, the autoscaler's "
        "decision within the bounds",
    )
    reason = serializers.SerializerMethodField(
        help_text="Why the autoscaler decided them (empty: it has not decided yet, or is off)"
    )
    decidedAt = serializers.SerializerMethodField()

    def get_reason(self, pool: MachinePool) -> str:
        decided = pool.decided
        return decided.reason if decided is not None and pool.autoscale_enabled else ""

    def get_decidedAt(self, pool: MachinePool) -> str | None:
        decided = pool.decided
        if decided is None or not pool.autoscale_enabled:
            return None
        return decided.decided_at.isoformat()

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            data = {"enabled": False, "min": 0, "max": 0, **data}
        return super().to_internal_value(data)


class PoolConditionSerializer(StrictInputMixin):
    """A condition of an imported pool, as Kubernetes writes them."""

    type = serializers.CharField(help_text="GpuFits: whether its GPUs can ever fit there")
    status = serializers.ChoiceField(choices=["True", "False"])
    reason = serializers.CharField()
    message = serializers.CharField(
        allow_blank=True, help_text="False: what the location offers instead"
    )


class MachinePoolSerializer(ModelCleanMixin):
    gpu = PoolGpuSerializer(source="*", required=False)
    autoscale = PoolAutoscaleSerializer(source="*", required=False)
    conditions = PoolConditionSerializer(
        many=True,
        read_only=True,
        help_text="Imported pools: GpuFits False means no machine is made (a pool made "
        "here whose GPUs can never fit is refused instead, 400 naming what the location "
        "offers). Empty for pools made here.",
    )
    error_paths = {
        "gpu_type": ("gpu", "type"),
        "gpu_profile_id": ("gpu", "profileId"),
        "gpu_count": ("gpu", "count"),
        "gpu_driver_version": ("gpu", "driverVersion"),
        "autoscale_enabled": ("autoscale", "enabled"),
        "autoscale_min": ("autoscale", "min"),
        "autoscale_max": ("autoscale", "max"),
    }

    class Meta:
        model = MachinePool
        fields = [
            "id", "cluster", "site", "name", "replicas", "vcpus", "memory_mib", "disk_gib",
            "user_data", "gpu", "autoscale", "imported_from", "import_generation",
            "capi_sriov_secret_ref", "conditions",
        ]  # fmt: skip


class MachineSpecSerializer(serializers.Serializer[object]):
    """What a machine's VM was made with, from its pool then."""

    gpu_type = serializers.CharField(read_only=True)
    gpu_profile_id = serializers.CharField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True)
    vcpus = serializers.IntegerField(read_only=True)
    memory_mib = serializers.IntegerField(read_only=True)
    disk_gib = serializers.IntegerField(read_only=True)


class MachineVgpuSerializer(serializers.ModelSerializer[VgpuReservation]):
    """One vGPU a machine holds (being reserved, billed, or on its way out)."""

    class Meta:
        model = VgpuReservation
        fields = ["id", "name", "vgpu_id", "gpu_id", "state", "vm_id"]
        read_only_fields = fields


class MachineSerializer(serializers.ModelSerializer[Machine]):
    cluster = serializers.CharField(source="pool.cluster.name", read_only=True)
    vgpus = serializers.SerializerMethodField(
        help_text="Its vGPU reservations not released, by name"
    )
    vm_name = serializers.CharField(read_only=True)
    spec = MachineSpecSerializer(
        read_only=True,
        allow_null=True,
        help_text="What its VM was made with; null: no VM made yet",
    )
    # A person asked (MachineDeletion), or act took the teardown up (the machine's row).
    delete_requested = serializers.BooleanField(source="deletion_asked", read_only=True)
    spec_changes = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text='How its pool differs now ("vcpus 4 -> 8"): a machine with changes is '
        "replaced, one machine of the pool at a time",
    )
    # Its node, as the Kubernetes observer flags it (kube's MachineNode beside the machine).
    node_joined_at = serializers.DateTimeField(
        source="node_state.joined_at",
        read_only=True,
        allow_null=True,
        help_text="When a listing first showed its Kubernetes node",
    )
    node_missing = serializers.BooleanField(
        source="node_state.missing",
        read_only=True,
        help_text="No node of the cluster is this machine's, NODE_JOIN_TIMEOUT_SECONDS after "
        "its VM started (from a complete node listing).",
    )
    node_missing_reason = serializers.CharField(source="node_state.missing_reason", read_only=True)

    class Meta:
        model = Machine
        fields = [
            "id", "cluster", "pool", "name", "vm_name", "vm_id", "phase", "failure_message",
            "delete_requested", "created_at", "updated_at", "vm_started_at", "node_joined_at",
            "node_missing", "node_missing_reason", "failures", "next_try_at",
            "capacity_wait_since", "capacity_stuck_since", "spec", "spec_changes",
            "gpu_driver_version", "vgpus",
        ]  # fmt: skip
        read_only_fields = fields

    def to_representation(self, instance: Machine) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        data["spec"] = data["spec"] if instance.spec else None
        # No node flags yet: never seen, not flagged.
        data["node_missing"] = bool(data["node_missing"])
        data["node_missing_reason"] = data["node_missing_reason"] or ""
        return data

    @extend_schema_field(MachineVgpuSerializer(many=True))
    def get_vgpus(self, machine: Machine) -> list[dict[str, Any]]:
        # A list prefetches them (MachineViewSet); one machine alone reads them here.
        held = getattr(machine, HELD_VGPUS, None)
        if held is None:
            held = list(machine_vgpus_held().filter(machine=machine))
        return list(MachineVgpuSerializer(held, many=True).data)


class PassStepSerializer(serializers.Serializer[object]):
    kind = serializers.CharField()
    target = serializers.CharField()
    reason = serializers.CharField()


class PassOutcomeSerializer(serializers.Serializer[object]):
    kind = serializers.CharField()
    target = serializers.CharField()
    outcome = serializers.ChoiceField(
        choices=["ran", "sent", "blocked", "dropped", "waiting", "failed"],
        help_text="sent: handed to a worker, whose outcome its log tells",
    )
    message = serializers.CharField(help_text="Why it did not run (blocked, dropped, ...)")


class PlanPassSerializer(serializers.ModelSerializer[PlanPass]):
    """One reconcile pass of the cluster (scope `cluster`) or of its SR-IOV NICs (`nics`)."""

    planned = PassStepSerializer(many=True, read_only=True)
    outcomes = PassOutcomeSerializer(many=True, read_only=True)

    class Meta:
        model = PlanPass
        fields = ["id", "scope", "started_at", "planned", "outcomes", "plan_ms", "act_ms"]
        read_only_fields = fields


class PlanCallSerializer(serializers.Serializer[object]):
    """One whitesky (or Kubernetes) write a step makes."""

    service = serializers.ChoiceField(choices=["whitesky", "kubernetes"])
    verb = serializers.CharField(
        help_text="whitesky: the call's operationId in whitesky's API description "
        "(createVirtualMachine, stopVirtualMachine, deleteVGPU, ...); Kubernetes: the HTTP method"
    )
    object = serializers.CharField(
        help_text="The VM id (its name when the step makes it), vGPU id, '<VM>/<card>', "
        "or the Kubernetes object's path"
    )
    maybe = serializers.BooleanField(help_text="Made only if the VM is still there")


class PlanVgpuSlotSerializer(serializers.Serializer[object]):
    index = serializers.IntegerField()
    name = serializers.CharField()


class PlanVgpuReleaseSerializer(serializers.Serializer[object]):
    reservation_id = serializers.IntegerField()
    vgpu_id = serializers.CharField(
        allow_null=True, help_text="None: its reserve's answer was lost"
    )
    name = serializers.CharField()


class PlanVmRemovalSerializer(serializers.Serializer[object]):
    vm_id = serializers.IntegerField()
    cloudspace_id = serializers.CharField()
    name = serializers.CharField()
    status = serializers.CharField(help_text="As last listed; empty: not listed")


class PlanStepSerializer(serializers.Serializer[object]):
    """One step of the plan, with every decision it carries."""

    action = serializers.ChoiceField(source="kind", choices=KINDS)
    target = serializers.CharField(
        help_text="The machine (for reclaim, the cluster; else the node, DaemonSet or NIC)"
    )
    reason = serializers.CharField()
    pool_id = serializers.IntegerField(allow_null=True)
    machine_id = serializers.IntegerField(allow_null=True, help_text="None: made by the step")
    index = serializers.IntegerField(allow_null=True, help_text="create: the new machine's index")
    vm_id = serializers.IntegerField(allow_null=True, help_text="The machine's VM as planned")
    card_id = serializers.CharField(help_text="The GPU card the missing vGPUs go on")
    reserve = serializers.ListField(
        source="reserve_names", child=serializers.CharField(), help_text="vGPUs to reserve"
    )
    reserve_vgpus = PlanVgpuSlotSerializer(source="reserve", many=True)
    attach = serializers.ListField(child=serializers.CharField(), help_text="vGPU ids to attach")
    release = serializers.ListField(
        source="release_shown", child=serializers.CharField(), help_text="vGPUs to release"
    )
    release_vgpus = PlanVgpuReleaseSerializer(source="release", many=True)
    remove_vms = serializers.ListField(
        source="remove_vms_shown", child=serializers.CharField(), help_text="VMs to remove"
    )
    vms_removed = PlanVmRemovalSerializer(source="remove_vms", many=True)
    blocked = serializers.CharField(help_text="Why it cannot happen yet; empty: it can")
    blocked_by = serializers.CharField(
        help_text="observation, capacity, conflict, backoff, machines; empty: not blocked"
    )
    next_try_at = serializers.DateTimeField(
        allow_null=True, help_text="backoff: when the failed machine is tried again"
    )
    calls = PlanCallSerializer(many=True, help_text="The writes the step makes")
    description = serializers.CharField(source="describe", help_text="The step in words")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # The kinds of the planners registered when the apps were ready.
        fields["action"] = serializers.ChoiceField(source="kind", choices=planned_kinds())
        return fields

    def to_representation(self, instance: Any) -> dict[str, Any]:
        if hasattr(instance, "shown"):  # a machine step: one flat shape for every kind
            return dict(super().to_representation(instance.shown()))
        # A registered planner's step (node labels, the GPU add-on, NIC reclaim): it names
        # no machine, card or vGPU.
        return {
            "action": instance.kind,
            "target": instance.target,
            "reason": instance.reason,
            "pool_id": None,
            "machine_id": None,
            "index": None,
            "vm_id": None,
            "card_id": "",
            "reserve": [],
            "reserve_vgpus": [],
            "attach": [],
            "release": [],
            "release_vgpus": [],
            "remove_vms": [],
            "vms_removed": [],
            "blocked": "",
            "blocked_by": "",
            "next_try_at": None,
            "calls": PlanCallSerializer(instance.calls(), many=True).data,
            "description": instance.describe(),
        }


class LocationPlanStepSerializer(serializers.Serializer[object]):
    """One step of a location's plan: the orphan sweep and the releases it carries on."""

    action = serializers.CharField(source="kind", help_text="release_vgpu or remove_vm")
    target = serializers.CharField(help_text="The vGPU's or VM's name")
    reason = serializers.CharField()
    reservation_id = serializers.IntegerField(allow_null=True)
    vgpu_id = serializers.CharField(help_text="release_vgpu: the vGPU released")
    vm = PlanVmRemovalSerializer(
        allow_null=True, help_text="remove_vm: the VM; release_vgpu: the VM removed first"
    )
    blocked = serializers.CharField(help_text="Why it cannot happen; empty: it can")
    calls = PlanCallSerializer(many=True, help_text="The writes the step makes")
    description = serializers.CharField(source="describe", help_text="The step in words")


class DeleteReasonSerializer(StrictInputMixin):
    """Deleting an empty pool, site or account destroys nothing billed: a reason is
    welcome (it goes into the audit record) but not required."""

    reason = ReasonField(required=False, allow_blank=True, default="")


class ConfirmedDeleteSerializer(StrictInputMixin):
    """Deleting a cluster, or a machine without teardown: why (it goes into the audit
    record), and the object's name typed again, so that a call meant for another row is
    refused (400 on `confirm`) instead of acted on."""

    reason = ReasonField()
    confirm = serializers.CharField(
        max_length=200,
        help_text="The name of the cluster or machine being deleted, typed again.",
    )


class PoolScaleSerializer(StrictInputMixin):
    """Scaling a pool: the replicas wanted, and why (it goes into the audit record)."""

    replicas = serializers.IntegerField(min_value=0, validators=[replicas_bound])
    reason = ReasonField()
