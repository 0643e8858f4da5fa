from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models
from rest_framework import serializers

from capvco_web.api import HAS_TEXT, ModelCleanMixin, ReasonField, StrictInputMixin
from clusters.models import Account, Cluster, ClusterSite, Location, Machine, MachinePool
from clusters.plan import ACTIONS


class AccountSerializer(ModelCleanMixin):
    credential = serializers.CharField(
        write_only=True, style={"input_type": "password"}, help_text="The JWT; never returned."
    )

    class Meta:
        model = Account
        fields = [
            "id", "name", "api_url", "iam_url", "customer_id", "credential",
            "orphan_auto_release", "orphan_grace_period", "orphan_confirmations",
        ]  # fmt: skip

    def create(self, validated_data: dict[str, Any]) -> Account:
        return Account.objects.create(**validated_data)


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


class ClusterSerializer(ModelCleanMixin):
    sites = ClusterSiteSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = ["id", "name", "account", "state", "deletion_blockers", "created_at", "sites"]
        read_only_fields = ["state", "deletion_blockers", "created_at"]


def _gpu_field(model_field: str) -> serializers.CharField:
    """A string of the `gpu` object, bounded and validated as the pool's own field."""
    field = MachinePool._meta.get_field(model_field)
    assert isinstance(field, models.CharField)
    return serializers.CharField(
        source=model_field,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        max_length=field.max_length,
        validators=list(field.validators),
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
    count = serializers.IntegerField(source="gpu_count", min_value=0, max_value=8, default=0)
    driverVersion = _gpu_field("gpu_driver_version")

    schema_rules = {
        "anyOf": [
            {
                "properties": {
                    "count": {"enum": [0]},
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


class MachinePoolSerializer(ModelCleanMixin):
    gpu = PoolGpuSerializer(source="*", required=False)
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
            "user_data", "gpu",
        ]  # fmt: skip


class MachineSerializer(serializers.ModelSerializer[Machine]):
    cluster = serializers.CharField(source="pool.cluster.name", read_only=True)
    vm_name = serializers.CharField(read_only=True)

    class Meta:
        model = Machine
        fields = [
            "id", "cluster", "pool", "name", "vm_name", "vm_id", "phase", "failure_message",
            "delete_requested", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class PlanStepSerializer(serializers.Serializer[object]):
    """One step of the plan, with every decision it carries."""

    action = serializers.ChoiceField(choices=ACTIONS)
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


class DeleteReasonSerializer(StrictInputMixin):
    """Deleting an empty pool, site or account destroys nothing billed: a reason is
    welcome (it goes into the audit record) but not required."""

    reason = ReasonField(required=False, allow_blank=True, default="")
