from __future__ import annotations

from decimal import Decimal

from django.contrib.auth.models import User
from rest_framework import serializers

from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of


class GpuProfileSerializer(serializers.ModelSerializer[GpuProfile]):
    gpu_type = serializers.SerializerMethodField()

    class Meta:
        model = GpuProfile
        fields = [
            "id", "location", "profile_id", "gpu_type", "vendor", "model", "pci_address",
            "description", "available_instances",
        ]  # fmt: skip
        read_only_fields = fields

    def get_gpu_type(self, card: GpuProfile) -> str:
        return gpu_type_of(card)


class GpuTypeOfferSerializer(serializers.Serializer[object]):
    location = serializers.CharField()
    gpu_type = serializers.CharField()
    cards = serializers.IntegerField()
    free = serializers.IntegerField()
    most_on_one_card = serializers.IntegerField()


class VgpuReservationSerializer(serializers.ModelSerializer[VgpuReservation]):
    location_name = serializers.CharField(source="location.name", read_only=True)
    accrued_cost = serializers.SerializerMethodField(help_text="Since it was flagged orphaned")
    currency = serializers.CharField(source="location.currency", read_only=True)
    # What the listings say of it (observe's ListedVgpu row).
    first_seen_at = serializers.DateTimeField(read_only=True, allow_null=True)
    unassigned_since = serializers.DateTimeField(read_only=True, allow_null=True)
    orphaned_since = serializers.DateTimeField(read_only=True, allow_null=True)
    orphan_confirmations = serializers.IntegerField(
        read_only=True, help_text="Consecutive complete listings that showed it orphaned"
    )
    release_requested_by = serializers.SlugRelatedField[User](
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = VgpuReservation
        fields = [
            "id", "location", "location_name", "name", "vgpu_id", "gpu_id", "state", "vm_id",
            "machine", "owner_cluster", "owner_machine", "owner_index", "first_seen_at",
            "updated_at", "unassigned_since", "orphaned_since", "orphan_confirmations",
            "released_at", "accrued_cost", "currency", "release_requested_at",
            "release_requested_by", "release_reason", "release_attempted_at", "release_error",
        ]  # fmt: skip
        read_only_fields = fields

    def get_accrued_cost(self, row: VgpuReservation) -> Decimal:
        return row.accrued_cost()
