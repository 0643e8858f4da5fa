"""The agent API: what the CNI plugin of a cluster's nodes calls, with the cluster's
agent token (`Authorization: Bearer cvsriov_...`).

    POST   /api/v1/sriov/agent/nics/            ADD: the attachment's NIC, attached
    GET    /api/v1/sriov/agent/nics/<pod uid>/?container_id=&ifname=
                                                CHECK: the attachment's NIC as recorded
    DELETE /api/v1/sriov/agent/nics/<pod uid>/?container_id=&ifname=
                                                DEL: detached and released (idempotent)
    POST   /api/v1/sriov/agent/gc/              GC: the node's NICs of attachments the
                                                runtime no longer lists, released

An attachment is (container id, ifname), as the CNI spec keys it: a DEL that names
another sandbox of the pod than the one holding its NIC changes nothing.

Unlike the rest of the API these calls reach whitesky (and, when the mirror does not know
a pod or node yet, the cluster's Kubernetes) while the request waits: the plugin needs
the NIC to finish the pod's sandbox.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from capvco_web.api import ErrorSerializer, StrictInputMixin
from capvco_web.auth import FailedTokenThrottle
from sriov.agent import Refused, attachment_nic, node_nics_gc, pod_nic_add, pod_nic_delete
from sriov.models import AgentToken, PodNic
from sriov.tokens import AgentTokenRefused, agent_token_authenticate

POD_UID_PATTERN = r"^[A-Za-z0-9-]{1,64}\Z"
# As the CNI spec (and libcni) allow them.
CONTAINER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z"
IFNAME_PATTERN = r"^(?!\.{1,2}\Z)[^/:\s]{1,15}\Z"
MAX_VALID_ATTACHMENTS = 10_000


class Agent:
    """Who calls: the node agents of one cluster (not a person)."""

    is_authenticated = True
    is_active = True
    is_superuser = False
    is_staff = False
    pk = None

    def __init__(self, token: AgentToken) -> None:
        self.token = token
        self.cluster = token.cluster

    def get_username(self) -> str:
        return f"sriov-agent of {self.cluster.name}"


class AgentTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Agent, AgentToken] | None:
        words = get_authorization_header(request).split()
        if len(words) != 2 or words[0].lower() != b"bearer":
            raise exceptions.NotAuthenticated("The agent API needs 'Bearer <agent token>'.")
        throttle = FailedTokenThrottle()
        wait = throttle.wait_needed(request)
        if wait is not None:
            raise exceptions.Throttled(wait, detail="Too many refused tokens from your address.")
        try:
            token = agent_token_authenticate(words[1].decode("ascii", errors="replace"))
        except AgentTokenRefused as exc:
            throttle.failure_record(request)
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return Agent(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="sriov-agent"'


class AgentTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = AgentTokenAuthentication
    name = "agentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "cvsriov_<id>_<secret>"}


class IsAgent(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Agent)


class AgentRefusal(exceptions.APIException):
    """A refusal of the agent service, with its status; 503s carry Retry-After."""

    def __init__(self, refused: Refused) -> None:
        super().__init__(detail=refused.message, code=refused.code)
        self.status_code = refused.status
        retry_after = getattr(refused, "retry_after", None)
        if refused.status == 503 and retry_after:
            self.wait = retry_after


class AttachmentSerializer(StrictInputMixin, serializers.Serializer[Any]):
    """(CNI_CONTAINERID, CNI_IFNAME): what a NIC is the attachment of."""

    container_id = serializers.RegexField(CONTAINER_ID_PATTERN, max_length=128)
    ifname = serializers.RegexField(IFNAME_PATTERN, max_length=15)


class AddSerializer(AttachmentSerializer):
    cni_network = serializers.CharField(
        max_length=253, required=False, help_text="The name of the CNI network configuration"
    )
    pod_uid = serializers.RegexField(POD_UID_PATTERN, max_length=64)
    namespace = serializers.CharField(max_length=63)
    pod_name = serializers.CharField(max_length=253)
    node_name = serializers.CharField(max_length=253)


class GcSerializer(StrictInputMixin, serializers.Serializer[Any]):
    node_name = serializers.CharField(max_length=253)
    cni_network = serializers.CharField(
        max_length=253, help_text="The name of the CNI network configuration GC is for"
    )
    valid_attachments = serializers.ListField(
        child=AttachmentSerializer(), max_length=MAX_VALID_ATTACHMENTS
    )


class GcAnswerSerializer(serializers.Serializer[Any]):
    released = serializers.ListField(child=serializers.CharField())
    kept = serializers.ListField(
        child=serializers.CharField(), help_text="Still attaching, or asked for too lately"
    )
    failed = serializers.ListField(
        child=serializers.CharField(), help_text="Not released now: tried again later"
    )


class NicSerializer(serializers.ModelSerializer[PodNic]):
    """The NIC as the plugin configures it."""

    address = serializers.IPAddressField(source="ip", allow_null=True)
    prefix = serializers.IntegerField(source="prefix_len", allow_null=True)
    network = serializers.CharField(source="network_name")

    class Meta:
        model = PodNic
        fields = [
            "pod_uid", "namespace", "pod_name", "node_name", "container_id", "ifname", "vm_id",
            "network_id", "network",
            "state", "mac", "address", "prefix", "gateway", "mtu", "failure",
        ]  # fmt: skip
        read_only_fields = fields


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


_BUSY = _error("The VM's queue or whitesky is busy: try again after Retry-After.")


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]
    throttle_classes: list[Any] = []  # machines of the cluster; refused tokens are throttled

    def agent(self, request: Request) -> Agent:
        user = request.user
        assert isinstance(user, Agent)
        return user


class AgentNicsView(AgentView):
    @extend_schema(
        request=AddSerializer,
        responses={
            200: NicSerializer,
            403: _error("The pod or node is another cluster's, or the pod runs on another node."),
            404: _error("No such pod in the cluster."),
            409: _error(
                "Refused: SR-IOV off, the node is no machine of the cluster, whitesky "
                "refused the attach (the answer says why; the VM is never stopped)."
            ),
            503: _BUSY,
        },
    )
    def post(self, request: Request) -> Response:
        """ADD: attach the pod's NIC (or answer the one it has)."""
        asked = AddSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        data = asked.validated_data
        try:
            nic = pod_nic_add(
                cluster=self.agent(request).cluster,
                pod_uid=data["pod_uid"],
                namespace=data["namespace"],
                pod_name=data["pod_name"],
                node_name=data["node_name"],
                container_id=data["container_id"],
                ifname=data["ifname"],
                cni_network=data.get("cni_network", ""),
            )
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        return Response(NicSerializer(nic).data)


def _attachment(request: Request) -> dict[str, str]:
    asked = AttachmentSerializer(data=request.query_params.dict())
    asked.is_valid(raise_exception=True)
    return dict(asked.validated_data)


_ATTACHMENT = [
    OpenApiParameter("container_id", str, required=True, description="CNI_CONTAINERID"),
    OpenApiParameter("ifname", str, required=True, description="CNI_IFNAME"),
]


class AgentNicView(AgentView):
    serializer_class = NicSerializer  # what CHECK answers; DEL takes no body

    @extend_schema(
        parameters=_ATTACHMENT,
        responses={
            200: NicSerializer,
            404: _error("The attachment holds no live NIC in the cluster."),
        },
    )
    def get(self, request: Request, pod_uid: str) -> Response:
        """CHECK: the attachment's live NIC as recorded."""
        key = _attachment(request)
        nic = attachment_nic(cluster=self.agent(request).cluster, pod_uid=pod_uid, **key)
        if nic is None:
            raise exceptions.NotFound(
                f"Pod {pod_uid} has no NIC for container {key['container_id']} and "
                f"interface {key['ifname']} in this cluster."
            )
        return Response(NicSerializer(nic).data)

    @extend_schema(
        parameters=_ATTACHMENT,
        responses={
            204: None,
            403: _error("The pod is another cluster's."),
            409: _error("Refused: whitesky refused the detach (the answer says why)."),
            503: _BUSY,
        },
    )
    def delete(self, request: Request, pod_uid: str) -> Response:
        """DEL: detach and release the attachment's NIC; 204 also when it holds none."""
        key = _attachment(request)
        try:
            pod_nic_delete(
                cluster=self.agent(request).cluster,
                pod_uid=pod_uid,
                container_id=key["container_id"],
                ifname=key["ifname"],
            )
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)


class AgentGcView(AgentView):
    @extend_schema(request=GcSerializer, responses={200: GcAnswerSerializer})
    def post(self, request: Request) -> Response:
        """GC (CNI 1.1): release the node's NICs whose attachment is not among the valid
        ones, except those still attaching or asked for within the reclaim grace."""
        asked = GcSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        data = asked.validated_data
        result = node_nics_gc(
            cluster=self.agent(request).cluster,
            node_name=data["node_name"],
            cni_network=data["cni_network"],
            valid=[(a["container_id"], a["ifname"]) for a in data["valid_attachments"]],
        )
        return Response(
            {
                "released": [f"{row} ({row.container_id}/{row.ifname})" for row in result.released],
                "kept": [f"{row} ({row.container_id}/{row.ifname})" for row in result.kept],
                "failed": result.errors,
            }
        )
