from __future__ import annotations

from typing import Any, Literal

from rest_framework import serializers

from capvco_web.api import HAS_TEXT, ReasonField, ReasonSerializer, StrictInputMixin
from capvco_web.validators import visible_text
from cloud.models import MAX_CREDENTIAL_LENGTH, jwt_shape
from sriov.models import AGENT_TOKEN_PREFIX, MAX_MTU, MIN_MTU, ExternalNetwork, LeakedNic, PodNic


class PodNicSerializer(serializers.ModelSerializer[PodNic]):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    location_name = serializers.CharField(source="location.name", read_only=True)
    pod_gone_since = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="Since when complete pod listings show its pod gone or finished; it is "
        "reclaimed once the grace period has passed.",
    )

    class Meta:
        model = PodNic
        fields = [
            "id", "cluster", "cluster_name", "pod_uid", "namespace", "pod_name", "node_name",
            "machine", "location", "location_name", "cloudspace_id", "vm_id", "network_id",
            "network_name", "mac", "ip", "prefix_len", "gateway", "mtu", "state", "failure",
            "container_id", "requested_at", "attach_started_at", "attached_at",
            "detach_requested_at", "released_at", "pod_gone_since", "release_reason",
            "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class LeakedNicSerializer(serializers.ModelSerializer[LeakedNic]):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    location_name = serializers.CharField(source="location.name", read_only=True)
    detach_requested_by = serializers.CharField(
        source="detach_requested_by.username", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = LeakedNic
        fields = [
            "id", "cluster", "cluster_name", "location", "location_name", "cloudspace_id",
            "vm_id", "network_id", "mac", "ip", "leaked_since",
            "detach_requested_at", "detach_requested_by", "detach_reason", "failure",
        ]  # fmt: skip
        read_only_fields = fields


class ExternalNetworkSerializer(serializers.ModelSerializer[ExternalNetwork]):
    location_name = serializers.CharField(source="location.name", read_only=True)

    class Meta:
        model = ExternalNetwork
        fields = [
            "id", "location", "location_name", "network_id", "name", "network", "gateway",
            "prefix_len", "free_addresses", "last_seen_at",
        ]  # fmt: skip
        read_only_fields = fields


class NetworkUseSerializer(serializers.Serializer[Any]):
    location = serializers.CharField()
    network_id = serializers.IntegerField()
    name = serializers.CharField()
    network = serializers.CharField()
    prefix_len = serializers.IntegerField(allow_null=True)
    free_addresses = serializers.IntegerField(allow_null=True)
    nics = serializers.IntegerField(help_text="Addresses held by pod NICs")


class QueuedNicSerializer(serializers.ModelSerializer[PodNic]):
    class Meta:
        model = PodNic
        fields = ["id", "pod_uid", "namespace", "pod_name", "state", "requested_at"]
        read_only_fields = fields


class VmQueueSerializer(serializers.Serializer[Any]):
    cluster = serializers.CharField()
    location = serializers.CharField()
    vm_id = serializers.IntegerField()
    node_name = serializers.CharField()
    length = serializers.IntegerField(help_text="Attaches and detaches waiting for the VM's turn")
    oldest_wait_since = serializers.DateTimeField(allow_null=True)
    in_turn = QueuedNicSerializer(many=True, help_text="Attaching or detaching now")
    waiting = QueuedNicSerializer(many=True, help_text="Oldest first")


class AgentTokenInfoSerializer(serializers.Serializer[Any]):
    """An agent token without its secret: the cluster's enrollment token, or a node's."""

    prefix = serializers.SerializerMethodField()
    kind = serializers.SerializerMethodField()
    node_name = serializers.CharField(help_text="The node a node token is bound to; empty: none")
    enrolled_from = serializers.IPAddressField(
        allow_null=True, help_text="The address a node token was asked from"
    )
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)

    def get_prefix(self, token: Any) -> str:
        return f"{AGENT_TOKEN_PREFIX}{token.key_id}"

    def get_kind(self, token: Any) -> Literal["enrollment", "node"]:
        return "node" if token.node_name else "enrollment"


class SriovStatusSerializer(serializers.Serializer[Any]):
    """A cluster's SR-IOV as the API shows it: never the credential, only whether there
    is one."""

    cluster = serializers.IntegerField(source="cluster.pk")
    cluster_name = serializers.CharField(source="cluster.name")
    enabled = serializers.BooleanField()
    external_network = serializers.CharField()
    has_credential = serializers.BooleanField()
    credential_set_at = serializers.DateTimeField(allow_null=True)
    credential_source = serializers.CharField(
        help_text="Empty: given by an admin; imported clusters: the Secret it is read from"
    )
    credential_error = serializers.CharField()
    mtu = serializers.IntegerField()
    install_node_side = serializers.BooleanField()
    agent_tokens = AgentTokenInfoSerializer(many=True)


class SriovSetSerializer(StrictInputMixin, serializers.Serializer[Any]):
    """What is left out is kept. Enabling it needs a credential and an external network,
    given here or kept (409 when none is kept)."""

    enabled = serializers.BooleanField(required=False)
    external_network = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        validators=[visible_text],
    )
    credential = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=MAX_CREDENTIAL_LENGTH,
        validators=[jwt_shape],
        help_text="The JWT for NIC attach and detach, made for SR-IOV (write-only; left out: "
        "kept). Never the account's own credential.",
    )
    mtu = serializers.IntegerField(min_value=MIN_MTU, max_value=MAX_MTU, required=False)
    install_node_side = serializers.BooleanField(
        required=False,
        help_text="The SR-IOV add-on: apply the node manifests to the cluster when a token "
        "is made.",
    )
    reason = ReasonField(required=False, allow_blank=True)

    schema_rules = {
        "anyOf": [
            {"properties": {"enabled": {"type": "boolean", "enum": [False]}}},
            {"properties": {"external_network": {"pattern": HAS_TEXT}}},
        ]
    }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        network = attrs.get("external_network")
        if attrs.get("enabled") and network is not None and not network.strip():
            raise serializers.ValidationError(
                {"external_network": "Name the external network pods get NICs on."}
            )
        return attrs


class TokenRotateSerializer(StrictInputMixin, serializers.Serializer[Any]):
    overlap_seconds = serializers.IntegerField(
        min_value=0,
        max_value=86400,
        default=0,
        help_text="How long the replaced tokens keep working (0: not at all).",
    )
    reason = ReasonField(required=False, allow_blank=True)


class NodeTokenRevokeSerializer(StrictInputMixin, serializers.Serializer[Any]):
    node_name = serializers.CharField(max_length=253)
    reason = ReasonField()


class NodeTokenRevokedSerializer(serializers.Serializer[Any]):
    node_name = serializers.CharField()
    revoked = serializers.IntegerField(help_text="How many of the node's tokens were deleted")


class TokenMadeSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(help_text="Shown this once: it is kept only as a hash.")
    prefix = serializers.CharField()
    manifests = serializers.CharField(help_text="The node manifests, with this token in.")
    applied = serializers.BooleanField(
        help_text="Whether the control plane applied them to the cluster (install_node_side)."
    )
    apply_error = serializers.CharField(allow_blank=True)


class DetachRequestSerializer(ReasonSerializer):
    """Why the leaked NIC is detached (for the audit record)."""
