from __future__ import annotations

from typing import Any

from rest_framework import serializers

from sriov.models import AGENT_TOKEN_PREFIX, MAX_MTU, MIN_MTU, ExternalNetwork, LeakedNic, PodNic


class PodNicSerializer(serializers.ModelSerializer[PodNic]):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    location_name = serializers.CharField(source="location.name", read_only=True)

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
    length = serializers.IntegerField(help_text="Requests waiting for the VM's turn")
    oldest_wait_since = serializers.DateTimeField(allow_null=True)
    in_turn = QueuedNicSerializer(many=True, help_text="Attaching or detaching now")
    waiting = QueuedNicSerializer(many=True, help_text="Oldest first")


class AgentTokenInfoSerializer(serializers.Serializer[Any]):
    prefix = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)

    def get_prefix(self, token: Any) -> str:
        return f"{AGENT_TOKEN_PREFIX}{token.key_id}"


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


class SriovSetSerializer(serializers.Serializer[Any]):
    enabled = serializers.BooleanField(required=False)
    external_network = serializers.CharField(max_length=200, required=False, allow_blank=True)
    credential = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        help_text="The JWT for NIC attach and detach, made for SR-IOV (write-only; left out: "
        "kept). Never the account's own credential.",
    )
    mtu = serializers.IntegerField(min_value=MIN_MTU, max_value=MAX_MTU, required=False)
    install_node_side = serializers.BooleanField(
        required=False,
        help_text="The SR-IOV add-on: apply the node manifests to the cluster when a token "
        "is made.",
    )
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True)


class TokenRotateSerializer(serializers.Serializer[Any]):
    overlap_seconds = serializers.IntegerField(
        min_value=0,
        max_value=86400,
        default=0,
        help_text="How long the replaced tokens keep working (0: not at all).",
    )
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True)


class TokenMadeSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(help_text="Shown this once: it is kept only as a hash.")
    prefix = serializers.CharField()
    manifests = serializers.CharField(help_text="The node manifests, with this token in.")
    applied = serializers.BooleanField(
        help_text="Whether the control plane applied them to the cluster (install_node_side)."
    )
    apply_error = serializers.CharField(allow_blank=True)


class DetachRequestSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=1000, trim_whitespace=True)
