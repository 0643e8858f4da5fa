"""SR-IOV for people: each cluster's configuration (admins enable it, set its credential
and rotate its agent token), the pod NICs, each VM's attach queue, leaked NICs and the
external networks. Reads the database only; changes go through the audited services."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import KnownParametersMixin, api_validation_error
from capvco_web.api_input import CursorPagination
from capvco_web.permissions import AccountScopedViewSetMixin
from clusters.filtersets import ClusterFilterSet
from clusters.models import Cluster
from sriov.api.serializers import (
    DetachRequestSerializer,
    ExternalNetworkSerializer,
    LeakedNicSerializer,
    NetworkUseSerializer,
    NodeTokenRevokedSerializer,
    NodeTokenRevokeSerializer,
    PodNicSerializer,
    SriovSetSerializer,
    SriovStatusSerializer,
    TokenMadeSerializer,
    TokenRotateSerializer,
    VmQueueSerializer,
)
from sriov.filtersets import (
    ExternalNetworkFilterSet,
    LeakedNicFilterSet,
    PodNicFilterSet,
    VmQueueFilterSet,
)
from sriov.manifests import manifests_yaml, sriov_manifests
from sriov.models import AGENT_TOKEN_PREFIX, AgentToken, ExternalNetwork, LeakedNic, PodNic
from sriov.node_side import node_side_apply
from sriov.selectors import network_address_use, vm_queues
from sriov.services import leaked_nic_detach_request, sriov_config_of, sriov_config_set
from sriov.tokens import agent_token_rotate, node_token_revoke


@dataclass
class SriovStatus:
    cluster: Cluster
    enabled: bool
    external_network: str
    has_credential: bool
    credential_set_at: datetime | None
    credential_source: str
    credential_error: str
    mtu: int
    install_node_side: bool
    agent_tokens: list[AgentToken]


def _status(cluster: Cluster) -> SriovStatus:
    config = sriov_config_of(cluster)
    return SriovStatus(
        cluster=cluster,
        enabled=config.enabled,
        external_network=config.external_network,
        has_credential=config.has_credential,
        credential_set_at=config.credential_set_at,
        credential_source=config.credential_source,
        credential_error=config.credential_error,
        mtu=config.mtu,
        install_node_side=config.install_node_side,
        agent_tokens=list(
            AgentToken.objects.filter(cluster=cluster).order_by("node_name", "-created_at")
        ),
    )


def agent_url(request: Request) -> str:
    return settings.SRIOV_AGENT_URL or request.build_absolute_uri("/api/v1/sriov/agent/")


class SriovClusterViewSet(
    KnownParametersMixin,
    AccountScopedViewSetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Cluster],
):
    """Each cluster's SR-IOV. Reading needs any role in its account; changing it and
    rotating its agent token need the admin role (the service checks)."""

    queryset = Cluster.objects.select_related("account").order_by("name")
    serializer_class = SriovStatusSerializer
    filterset_class = ClusterFilterSet
    action_verbs = {
        "update": "view",
        "agent_token": "view",
        "node_token_revoke": "view",
        "manifests": "view",
    }

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        clusters = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        data = SriovStatusSerializer([_status(c) for c in clusters or []], many=True).data
        return self.get_paginated_response(data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(SriovStatusSerializer(_status(self.get_object())).data)

    def check_object_permissions(self, request: Request, obj: Any) -> None:
        # The browsable API asks about the object it shows, the status of the cluster:
        # the roles speak of the cluster.
        super().check_object_permissions(
            request, obj.cluster if isinstance(obj, SriovStatus) else obj
        )

    @extend_schema(request=SriovSetSerializer, responses={200: SriovStatusSerializer})
    def update(self, request: Request, pk: str | None = None) -> Response:
        """Enable or disable SR-IOV, set its network, MTU and credential (write-only; it
        is required to enable, and never the account's own). Admins only. Audited."""
        cluster = self.get_object()
        asked = SriovSetSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        changes = dict(asked.validated_data)
        reason = changes.pop("reason", "")
        try:
            sriov_config_set(cluster=cluster, changes=changes, actor=request.user, reason=reason)
        except DjangoValidationError as exc:
            raise api_validation_error(exc) from exc
        return Response(SriovStatusSerializer(_status(cluster)).data)

    @extend_schema(request=TokenRotateSerializer, responses={201: TokenMadeSerializer})
    @action(detail=True, methods=["post"], url_path="agent-token")
    def agent_token(self, request: Request, pk: str | None = None) -> Response:
        """Make the cluster's new enrollment token and retire the other enrollment tokens
        (at once, or after `overlap_seconds`). The token is in this answer only, with the
        node manifests that carry it; with the SR-IOV add-on on (`install_node_side`) they
        are applied to the cluster too. Each node's installer then enrolls again and gets
        a new node token. Admins only. Audited."""
        cluster = self.get_object()
        asked = TokenRotateSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        token, raw = agent_token_rotate(
            cluster=cluster,
            actor=request.user,
            overlap=timedelta(seconds=asked.validated_data["overlap_seconds"]),
            reason=asked.validated_data.get("reason", ""),
        )
        objects = sriov_manifests(cluster=cluster, agent_url=agent_url(request), token=raw)
        applied, apply_error = False, ""
        if sriov_config_of(cluster).install_node_side:
            apply_error = node_side_apply(cluster=cluster, objects=objects, actor=request.user)
            applied = not apply_error
        manifests = manifests_yaml(objects)
        body = {
            "applied": applied,
            "apply_error": apply_error,
            "token": raw,
            "prefix": f"{AGENT_TOKEN_PREFIX}{token.key_id}",
            "manifests": manifests,
        }
        return Response(TokenMadeSerializer(body).data, status=201)

    @extend_schema(request=NodeTokenRevokeSerializer, responses={200: NodeTokenRevokedSerializer})
    @action(detail=True, methods=["post"], url_path="node-token-revoke")
    def node_token_revoke(self, request: Request, pk: str | None = None) -> Response:
        """Delete a node's agent tokens (from now on they answer 401), e.g. when a new
        machine takes the name of one that held a token. The node may then enroll again
        with the enrollment token. Admins only, with a reason. Audited."""
        cluster = self.get_object()
        asked = NodeTokenRevokeSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        node = asked.validated_data["node_name"]
        revoked = node_token_revoke(
            cluster=cluster,
            node_name=node,
            actor=request.user,
            reason=asked.validated_data["reason"],
        )
        return Response(NodeTokenRevokedSerializer({"node_name": node, "revoked": revoked}).data)

    @extend_schema(responses={(200, "application/yaml"): OpenApiResponse(description="YAML")})
    @action(detail=True, methods=["get"])
    def manifests(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The node manifests (Secret, DaemonSet, NetworkAttachmentDefinition) as YAML; the
        Secret has a placeholder where the agent token goes (rotate for a new one)."""
        cluster = self.get_object()
        text = manifests_yaml(sriov_manifests(cluster=cluster, agent_url=agent_url(request)))
        response = HttpResponse(text, content_type="application/yaml")
        response["Content-Disposition"] = f'attachment; filename="{cluster.name}-sriov.yaml"'
        return response


class PodNicViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[PodNic]
):
    """The NIC of each pod: pod, node, VM, network, address, MAC, state and times."""

    queryset = PodNic.objects.select_related("cluster", "location", "gone").order_by(
        "-requested_at"
    )
    serializer_class = PodNicSerializer
    filterset_class = PodNicFilterSet
    pagination_class = CursorPagination  # a big list: keyset pages, in id order


class LeakedNicViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[LeakedNic]
):
    """NICs on the SR-IOV network of a cluster's VMs that no pod NIC owns."""

    queryset = LeakedNic.objects.select_related("cluster", "location").order_by("leaked_since")
    serializer_class = LeakedNicSerializer
    filterset_class = LeakedNicFilterSet
    action_verbs = {"detach": "detach"}

    @extend_schema(request=DetachRequestSerializer, responses={202: LeakedNicSerializer})
    @action(detail=True, methods=["post"])
    def detach(self, request: Request, pk: str | None = None) -> Response:
        """Ask for the leaked NIC to be detached (operators, with a reason): the next
        reclaim pass does it with the cluster's SR-IOV credential. Audited."""
        nic = self.get_object()
        asked = DetachRequestSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        nic = leaked_nic_detach_request(
            nic=nic, actor=request.user, reason=asked.validated_data["reason"]
        )
        return Response(LeakedNicSerializer(nic).data, status=202)


class ExternalNetworkViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[ExternalNetwork]
):
    """External networks per location, as last listed."""

    queryset = ExternalNetwork.objects.select_related("location").order_by("location", "network_id")
    serializer_class = ExternalNetworkSerializer
    filterset_class = ExternalNetworkFilterSet
    action_verbs = {"address_use": "view"}

    @extend_schema(responses=NetworkUseSerializer(many=True))
    # All of them, as one list: neither paged nor filtered.
    @action(
        detail=False,
        methods=["get"],
        url_path="address-use",
        pagination_class=None,
        filter_backends=[],
    )
    def address_use(self, request: Request) -> Response:
        """Per location and network: free addresses (as last listed) and those pod NICs
        hold."""
        return Response(NetworkUseSerializer(network_address_use(request.user), many=True).data)


class VmQueueView(KnownParametersMixin, generics.GenericAPIView[PodNic]):
    """Each VM's NIC queue: the request in its turn, and those waiting, oldest first."""

    queryset = PodNic.objects.all()
    filterset_class = VmQueueFilterSet
    pagination_class = None  # the VMs with work under way: all of them

    @extend_schema(responses=VmQueueSerializer(many=True))
    def get(self, request: Request) -> Response:
        queues = vm_queues(request.user, nics=self.filter_queryset(self.get_queryset()))
        return Response(VmQueueSerializer(queues, many=True).data)
