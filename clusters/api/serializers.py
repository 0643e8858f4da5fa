from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MaxLengthValidator
from django.db import models
from rest_framework import serializers

from capvco_web.api import ModelCleanMixin
from clusters.models import (
    MAX_CREDENTIAL_LENGTH,
    MAX_GPUS_PER_MACHINE,
    Account,
    Cloudspace,
    Cluster,
    ClusterSite,
    Image,
    KubeNode,
    KubePod,
    Location,
    Machine,
    MachinePool,
    Membership,
    jwt_shape,
)
from clusters.services import account_update_check


class AccountSerializer(ModelCleanMixin):
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
            "has_capi_kubeconfig", "capi_import_complete", "capi_import_error",
            "capi_import_started_at",
        ]  # fmt: skip

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if self.instance is not None:
            try:
                account_update_check(account=self.instance, changes=attrs)
            except DjangoValidationError as exc:
                raise serializers.ValidationError(exc.message_dict) from exc
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
        read_only_fields = [
            "state", "deletion_blockers", "created_at", "kube_observation_complete",
            "kube_observation_error", "kube_observation_started_at", "gpu_addon_applied_at",
            "gpu_addon_error", "imported_from",
        ]  # fmt: skip


class GpuAddonSerializer(serializers.Serializer[Cluster]):
    """The GPU add-on on or off; the change is audited with the reason."""

    enabled = serializers.BooleanField()
    reason = serializers.CharField(
        max_length=1000, trim_whitespace=True, required=False, allow_blank=True, default=""
    )


class KubeconfigSerializer(serializers.Serializer[Cluster]):
    """A new kubeconfig for a cluster; the change is audited (its server, never its secret)."""

    kubeconfig = serializers.CharField(
        write_only=True, trim_whitespace=True, style={"base_template": "textarea.html"}
    )
    reason = serializers.CharField(
        max_length=1000, trim_whitespace=True, required=False, allow_blank=True, default=""
    )


def _pool_text(field_name: str) -> dict[str, Any]:
    """The limits of a pool's text field as the model sets them, for a renamed field of the
    API, so that its schema states them too (the model validates them either way)."""
    field = MachinePool._meta.get_field(field_name)
    assert isinstance(field, models.CharField)
    validators = [v for v in field.validators if not isinstance(v, MaxLengthValidator)]
    return {
        "source": field_name,
        "max_length": field.max_length,
        "validators": validators,
        "required": False,
        "allow_blank": True,
        "default": "",
    }


class GpuRequestSerializer(serializers.Serializer[MachinePool]):
    """`gpu: {type, profileId, count, driverVersion}`: what a pool asks for, by type."""

    type = serializers.CharField(**_pool_text("gpu_type"))
    profileId = serializers.CharField(**_pool_text("gpu_profile_id"))
    count = serializers.IntegerField(
        source="gpu_count", min_value=0, max_value=MAX_GPUS_PER_MACHINE, default=0
    )
    driverVersion = serializers.CharField(**_pool_text("gpu_driver_version"))


class MachinePoolSerializer(ModelCleanMixin):
    gpu = GpuRequestSerializer(source="*", required=False)
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
        ]  # fmt: skip


class MachineSerializer(serializers.ModelSerializer[Machine]):
    cluster = serializers.CharField(source="pool.cluster.name", read_only=True)
    vm_name = serializers.CharField(read_only=True)

    class Meta:
        model = Machine
        fields = [
            "id", "cluster", "pool", "name", "vm_name", "vm_id", "phase", "failure_message",
            "delete_requested", "created_at", "updated_at", "vm_started_at", "node_joined_at",
            "node_missing", "node_missing_reason",
        ]  # fmt: skip
        read_only_fields = fields


class PlanStepSerializer(serializers.Serializer[object]):
    """One step of the plan, with every decision it carries."""

    action = serializers.CharField(help_text="create, provision, replace_vm, teardown or reclaim")
    target = serializers.CharField(help_text="The machine (or, for reclaim, the cluster)")
    reason = serializers.CharField()
    pool_id = serializers.IntegerField(allow_null=True)
    machine_id = serializers.IntegerField(allow_null=True, help_text="None: made by the step")
    card_id = serializers.CharField(help_text="The GPU card the missing vGPUs go on")
    reserve = serializers.ListField(child=serializers.CharField(), help_text="vGPUs to reserve")
    release = serializers.ListField(child=serializers.CharField(), help_text="vGPUs to release")
    remove_vms = serializers.ListField(child=serializers.CharField(), help_text="VMs to remove")
    blocked = serializers.CharField(help_text="Why it cannot happen yet; empty: it can")
    description = serializers.CharField(source="describe", help_text="The step in words")


class DeleteReasonSerializer(serializers.Serializer[object]):
    """Deleting an empty pool, site or account destroys nothing billed: a reason is
    welcome (it goes into the audit record) but not required."""

    reason = serializers.CharField(
        max_length=1000, trim_whitespace=True, required=False, allow_blank=True, default=""
    )


class PoolScaleSerializer(serializers.Serializer[object]):
    """Scaling a pool: the replicas wanted, and why (it goes into the audit record)."""

    replicas = serializers.IntegerField(min_value=0, max_value=100)
    reason = serializers.CharField(max_length=1000, trim_whitespace=True)


class MembershipSerializer(ModelCleanMixin):
    """A user's role in an account: viewer, operator or admin."""

    user = serializers.SlugRelatedField[User](slug_field="username", queryset=User.objects.all())
    role = serializers.SlugRelatedField[Group](
        slug_field="name", queryset=Group.objects.filter(name__in=Membership.Role.values)
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
            "sriov_network", "first_seen_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields
