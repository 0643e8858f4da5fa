from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MaxLengthValidator
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from capvco_web.api import (
    HAS_TEXT,
    NO_NUL,
    DurationTextField,
    ModelCleanMixin,
    ReasonField,
    StrictInputMixin,
    api_validation_error,
)
from cloud.models import (
    MAX_CREDENTIAL_LENGTH,
    MAX_ORPHAN_GRACE_PERIOD,
    Account,
    Cloudspace,
    Image,
    Location,
    Membership,
    VirtualMachine,
    jwt_shape,
)
from clusters.models import (
    MAX_GPUS_PER_MACHINE,
    Cluster,
    ClusterSite,
    KubeNode,
    KubePod,
    Machine,
    MachinePool,
    replicas_bound,
)
from clusters.plan import KINDS, Step, planned_kinds
from clusters.selectors import HELD_VGPUS, machine_vgpus_held
from clusters.services import account_update_check
from gpus import naming
from gpus.models import HOURLY_PLACES, VgpuReservation, hourly_price


class AccountSerializer(ModelCleanMixin):
    orphan_grace_period = DurationTextField(
        most=MAX_ORPHAN_GRACE_PERIOD,
        required=False,
        help_text="How long an orphan waits before it is released or removed: "
        f"[D ]HH:MM:SS, from 00:00:00 to {MAX_ORPHAN_GRACE_PERIOD.days} 00:00:00 "
        "(default 01:00:00).",
    )
    credential = serializers.CharField(
        write_only=True,
        max_length=MAX_CREDENTIAL_LENGTH,
        validators=[jwt_shape],
        style={"input_type": "password"},
        help_text="The JWT; never returned. Required again to change api_url or iam_url.",
    )

    has_capi_kubeconfig = serializers.BooleanField(
        read_only=True,
        help_text="Whether a management cluster's kubeconfig is stored: its Cluster API "
        "clusters are imported (PUT accounts/<id>/capi-kubeconfig/).",
    )

    class Meta:
        model = Account
        fields = [
            "id", "name", "api_url", "iam_url", "customer_id", "credential",
            "orphan_auto_release", "orphan_grace_period", "orphan_confirmations",
            "kube_insecure_tls_allowed", "has_capi_kubeconfig", "capi_import_complete",
            "capi_import_error", "capi_import_started_at",
        ]  # fmt: skip
        _plain = (
            "written plainly: https://host[:port]/path (http only to an origin listed so), "
            "the host one of WHITESKY_ALLOWED_HOSTS, no query or fragment; the pattern "
            "lists the hosts."
        )
        extra_kwargs = {
            "api_url": {"help_text": f"The VCO API base, e.g. https://vco.example/api/1, {_plain}"},
            "iam_url": {"help_text": f"The IAM host that refreshes the JWT, {_plain}"},
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if self.instance is not None:
            try:
                account_update_check(account=self.instance, changes=attrs)
            except DjangoValidationError as exc:
                raise api_validation_error(exc) from exc
        return attrs


class CloudspaceSerializer(serializers.ModelSerializer[Cloudspace]):
    """A cloudspace of the account at a location: what a site's `cloudspace_id` names."""

    class Meta:
        model = Cloudspace
        fields = ["id", "location", "cloudspace_id", "name", "status"]
        read_only_fields = fields


class ImageSerializer(serializers.ModelSerializer[Image]):
    """An image at a location: what a site's `image_id` names."""

    class Meta:
        model = Image
        fields = ["id", "location", "image_id", "name", "status", "os_type"]
        read_only_fields = fields


class LocationSerializer(serializers.ModelSerializer[Location]):
    class Meta:
        model = Location
        fields = [
            "id", "account", "name", "currency", "vgu_price",
            "observation_complete", "observation_error",
        ]  # fmt: skip
        read_only_fields = fields


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
        return str(hourly_price(vm.compute_monthly_price()).quantize(HOURLY_PLACES))

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
    kubernetes = KubeSummarySerializer(source="*", read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id", "name", "account", "state", "deletion_blockers", "created_at", "sites",
            "kubeconfig", "has_kubeconfig", "kube_observation_complete",
            "kube_observation_error", "kube_observation_started_at", "kubernetes",
            "gpu_addon", "gpu_addon_applied_at", "gpu_addon_error", "imported_from",
        ]  # fmt: skip
        # The name rule is the model's (clean): one name per account is only the part the
        # database holds, and its generic "must make a unique set" would say less.
        validators: list[Any] = []
        read_only_fields = [
            "state", "deletion_blockers", "created_at", "kube_observation_complete",
            "kube_observation_error", "kube_observation_started_at", "gpu_addon_applied_at",
            "gpu_addon_error", "imported_from",
        ]  # fmt: skip


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
    }

    class Meta:
        model = MachinePool
        fields = [
            "id", "cluster", "site", "name", "replicas", "vcpus", "memory_mib", "disk_gib",
            "user_data", "gpu", "imported_from", "import_generation", "capi_sriov_secret_ref",
            "conditions",
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
    spec_changes = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text='How its pool differs now ("vcpus 4 -> 8"): a machine with changes is '
        "replaced, one machine of the pool at a time",
    )

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
        return data

    @extend_schema_field(MachineVgpuSerializer(many=True))
    def get_vgpus(self, machine: Machine) -> list[dict[str, Any]]:
        # A list prefetches them (MachineViewSet); one machine alone reads them here.
        held = getattr(machine, HELD_VGPUS, None)
        if held is None:
            held = list(machine_vgpus_held().filter(machine=machine))
        return list(MachineVgpuSerializer(held, many=True).data)


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
        if isinstance(instance, Step):
            return dict(super().to_representation(instance))
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


@extend_schema_field({"type": "string", "enum": Membership.Role.values})
class RoleField(serializers.SlugRelatedField[Group]):
    """A role by name: one of the roles, or refused (400) as any other invalid value."""

    def __init__(self, **kwargs: Any) -> None:
        roles = Group.objects.filter(name__in=Membership.Role.values)
        super().__init__(slug_field="name", queryset=roles, **kwargs)

    def to_internal_value(self, data: Any) -> Group:
        if data not in Membership.Role.values:
            raise serializers.ValidationError(
                f"Choose one of {', '.join(Membership.Role.values)}.", code="invalid_choice"
            )
        return super().to_internal_value(data)


_USERNAME_LENGTH = User._meta.get_field("username").max_length


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": _USERNAME_LENGTH,
        "pattern": NO_NUL,
        "description": "The user's user name.",
    }
)
class UsernameField(serializers.SlugRelatedField[User]):
    """A user by user name. A name no user can have (too long, or with a NUL character,
    which the database refuses to compare) is invalid (400), not looked up. A user the
    caller may not know (the view narrows the queryset) reads as one nobody has."""

    default_error_messages = {
        "does_not_exist": "No user '{value}' that you may give a role: a "
        "superuser gives people their first role.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="username", queryset=User.objects.all(), **kwargs)

    def to_internal_value(self, data: Any) -> User:
        if isinstance(data, str) and ("\x00" in data or len(data) > (_USERNAME_LENGTH or 0)):
            raise serializers.ValidationError(
                f"Give a user name: at most {_USERNAME_LENGTH} characters, no NUL.",
                code="invalid",
            )
        return super().to_internal_value(data)


class MembershipSerializer(ModelCleanMixin):
    """A user's role in an account: viewer, operator or admin."""

    user = UsernameField()
    role = RoleField(
        help_text="viewer: reads; operator: also scales pools, deletes machines and clusters, "
        "releases reservations; admin: also the account, its sites, pools, clusters and members."
    )

    class Meta:
        model = Membership
        fields = ["id", "user", "account", "role"]


class KubeNodeSerializer(serializers.ModelSerializer[KubeNode]):
    """A Kubernetes node as last observed, and the machine whose VM it runs on."""

    cluster = serializers.CharField(source="cluster.name", read_only=True)
    gpu_type_label = serializers.CharField(
        read_only=True, help_text="Its capvco.io/gpu-type label (e.g. nvidia-a100); empty: none"
    )
    gpu_count_label = serializers.CharField(
        read_only=True, help_text="Its capvco.io/gpu-count label; empty: none"
    )
    gpu_requested = serializers.IntegerField(
        read_only=True, default=0, help_text="nvidia.com/gpu requested by the pods placed on it"
    )

    class Meta:
        model = KubeNode
        fields = [
            "id", "cluster", "name", "uid", "provider_id", "labels", "gpu_type_label",
            "gpu_count_label", "gpu_capacity", "gpu_allocatable", "gpu_requested", "ready",
            "kubelet_version", "machine", "unowned_since", "gpus_missing",
            "gpus_missing_reason", "first_seen_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class KubePodSerializer(serializers.ModelSerializer[KubePod]):
    """A Kubernetes pod as last observed: where it runs and what it asks for."""

    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = KubePod
        fields = [
            "id", "cluster", "namespace", "name", "uid", "node_name", "phase", "gpu_requests",
            "gpu_type", "sriov_network", "first_seen_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields
