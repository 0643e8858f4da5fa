"""The Kubernetes mirror in the API: nodes and pods as last observed."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from clusters.api.serializers import PlanStepSerializer
from clusters.plan import planned_kinds
from kube.models import GpuVerification, KubeNode, KubePod
from kube.plan import KINDS


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
    gpu_verification = serializers.ChoiceField(
        source="verify_status",
        choices=GpuVerification.Status.choices,
        read_only=True,
        allow_null=True,
        default=None,
        help_text="The verdict of the last verification of this node incarnation's GPUs by a "
        "pod that uses them (pending and running: not yet); null: none",
    )
    gpu_verification_reasons = serializers.ListField(
        source="verify_reasons",
        child=serializers.CharField(),
        read_only=True,
        help_text="Why it is not verified, each with both sides (billed, and what the node sees)",
    )
    gpu_verified_at = serializers.DateTimeField(
        source="verify_finished_at",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="When the verdict was reached",
    )

    class Meta:
        model = KubeNode
        fields = [
            "id", "cluster", "name", "uid", "provider_id", "labels", "gpu_type_label",
            "gpu_count_label", "gpu_capacity", "gpu_allocatable", "gpu_requested", "ready",
            "kubelet_version", "machine", "unowned_since", "gpus_missing",
            "gpus_missing_reason", "gpu_verification", "gpu_verification_reasons",
            "gpu_verified_at", "first_seen_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class KubePodSerializer(serializers.ModelSerializer[KubePod]):
    """A Kubernetes pod as last observed: where it runs and what it asks for."""

    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = KubePod
        fields = [
            "id", "cluster", "namespace", "name", "uid", "labels", "node_name", "phase",
            "gpu_requests", "gpu_type", "sriov_network", "first_seen_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


# A step of the whole plan of a cluster: its machines', its Kubernetes' (node labels, the
# GPU add-on: kube.plan), and those of the planners registered. The API's component and
# its description stay those of PlanStep.
@extend_schema_serializer(component_name="PlanStep")
class ClusterPlanStepSerializer(PlanStepSerializer):
    __doc__ = PlanStepSerializer.__doc__

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["action"] = serializers.ChoiceField(source="kind", choices=planned_kinds(*KINDS))
        return fields


class GpuUseRowSerializer(serializers.Serializer[Any]):
    """One GPU as its node's dcgm-exporter last showed it, and over the window."""

    node = serializers.CharField(source="node_name")
    gpu = serializers.IntegerField(help_text="Its index on the node")
    uuid = serializers.CharField()
    model = serializers.CharField(source="model_name")
    namespace = serializers.CharField(help_text="Of the pod that holds it; empty: none")
    pod = serializers.CharField(help_text="The pod that holds it; empty: none (idle)")
    status = serializers.ChoiceField(choices=["idle", "in use", "requested but unused"])
    utilisation_percent = serializers.IntegerField(source="utilisation")
    memory_used_mib = serializers.IntegerField()
    sampled_at = serializers.DateTimeField()
    mean_utilisation_percent = serializers.DecimalField(
        source="mean_utilisation", max_digits=4, decimal_places=1, allow_null=True,
        help_text="Over the window's reads while a pod held it; null: never held",
    )  # fmt: skip
    unused_since = serializers.DateTimeField(
        allow_null=True,
        help_text="Held by its pod below GPU_UNUSED_PERCENT since then (through the last read)",
    )
    pool = serializers.CharField(help_text="The pool of the node's machine; empty: not ours")
    machine = serializers.CharField()
    reservation = serializers.CharField(help_text="Our vGPU reservation for this GPU")


class GpuEfficiencySerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    efficiency_percent = serializers.DecimalField(
        source="percent", max_digits=4, decimal_places=1, allow_null=True,
        help_text="Used GPU-time over GPU-time held by pods in the window",
    )  # fmt: skip
    gpus = serializers.IntegerField(source="gpu_count")


class GpuUseSerializer(serializers.Serializer[Any]):
    """A cluster's GPU use as read from NVIDIA's dcgm-exporter (kube.gpu_use), over the
    last GPU_USE_WINDOW_HOURS; `has_data` false: no GPU use data, not 0 %."""

    exporter = serializers.CharField(help_text="Its Service, namespace/name; empty: none found")
    looked_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(help_text="What the last read missed: unknown, not unused")
    has_data = serializers.BooleanField()
    efficiency_percent = serializers.DecimalField(
        source="cluster.percent", max_digits=4, decimal_places=1, allow_null=True
    )
    requested_but_unused = serializers.IntegerField(source="unused_count")
    idle = serializers.IntegerField(source="idle_count")
    namespaces = GpuEfficiencySerializer(many=True)
    pools = GpuEfficiencySerializer(many=True)
    results = GpuUseRowSerializer(source="gpus", many=True)


class LocationGpuUseClusterSerializer(serializers.Serializer[Any]):
    """One cluster's GPUs in the location (of its nodes whose machines are there), as its
    last read of the exporter kept them."""

    cluster = serializers.IntegerField(source="state.cluster_id")
    cluster_name = serializers.CharField(source="state.cluster.name")
    efficiency_percent = serializers.DecimalField(
        max_digits=4, decimal_places=1, allow_null=True,
        help_text="Used GPU-time over GPU-time held by pods in the window; null: none held",
    )  # fmt: skip
    in_use = serializers.IntegerField(source="gpus_in_use")
    requested_but_unused = serializers.IntegerField(source="gpus_unused")
    idle = serializers.IntegerField(source="gpus_idle")
    looked_at = serializers.DateTimeField(
        source="state.looked_at", help_text="When its exporter was last read"
    )
    error = serializers.CharField(
        source="state.error",
        help_text="What its last read missed: unknown, not unused",
    )


class LocationGpuUseSerializer(serializers.Serializer[Any]):
    """A location's GPU use (kube.gpu_use.location_gpu_use): the GPUs of the nodes whose
    machines are in it, per cluster as each one's last read kept them (`results`) and
    summed; `has_data` false: no GPU use data, not 0 %."""

    location = serializers.IntegerField(source="location.pk")
    location_name = serializers.CharField(source="location.name")
    has_data = serializers.BooleanField()
    efficiency_percent = serializers.DecimalField(
        source="efficiency.percent", max_digits=4, decimal_places=1, allow_null=True,
        help_text="Used GPU-time over GPU-time held by pods, of every cluster's GPUs here",
    )  # fmt: skip
    in_use = serializers.IntegerField()
    requested_but_unused = serializers.IntegerField(source="unused")
    idle = serializers.IntegerField()
    results = LocationGpuUseClusterSerializer(source="clusters", many=True)
