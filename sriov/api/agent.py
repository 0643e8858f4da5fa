"""The agent API: what the CNI plugin of a cluster's nodes calls, with the cluster's
agent token (`Authorization: Bearer cvsriov_...`).

    POST   /api/v1/sriov/agent/nics/            ADD: the pod's NIC, attached (idempotent)
    GET    /api/v1/sriov/agent/nics/<pod uid>/  CHECK: the pod's NIC as recorded
    DELETE /api/v1/sriov/agent/nics/<pod uid>/  DEL: detached and released (idempotent)

Unlike the rest of the API these calls reach whitesky (and, when the mirror does not know
a pod or node yet, the cluster's Kubernetes) while the request waits: the plugin needs
the NIC to finish the pod's sandbox.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from capvco_web.api import ErrorSerializer, StrictInputMixin
from capvco_web.auth import FailedTokenThrottle
from sriov.agent import Refused, pod_nic_add, pod_nic_delete
from sriov.models import AgentToken, PodNic
from sriov.tokens import AgentTokenRefused, agent_token_authenticate

POD_UID_PATTERN = r"^[A-Za-z0-9-]{1,64}\Z"


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


class AddSerializer(StrictInputMixin, serializers.Serializer[Any]):
    pod_uid = serializers.RegexField(POD_UID_PATTERN, max_length=64)
    namespace = serializers.CharField(max_length=63)
    pod_name = serializers.CharField(max_length=253)
    node_name = serializers.CharField(max_length=253)
    container_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    ifname = serializers.CharField(max_length=15, required=False, allow_blank=True)


class NicSerializer(serializers.ModelSerializer[PodNic]):
    """The NIC as the plugin configures it."""

    address = serializers.IPAddressField(source="ip", allow_null=True)
    prefix = serializers.IntegerField(source="prefix_len", allow_null=True)
    network = serializers.CharField(source="network_name")

    class Meta:
        model = PodNic
        fields = [
            "pod_uid", "namespace", "pod_name", "node_name", "vm_id", "network_id", "network",
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
                container_id=data.get("container_id", ""),
            )
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        return Response(NicSerializer(nic).data)


class AgentNicView(AgentView):
    serializer_class = NicSerializer  # what CHECK answers; DEL takes no body

    def _live(self, request: Request, pod_uid: str) -> PodNic | None:
        return (
            PodNic.objects.filter(cluster=self.agent(request).cluster, pod_uid=pod_uid)
            .exclude(state=PodNic.State.RELEASED)
            .first()
        )

    @extend_schema(
        responses={200: NicSerializer, 404: _error("The pod has no live NIC in the cluster.")}
    )
    def get(self, request: Request, pod_uid: str) -> Response:
        """CHECK: the pod's live NIC as recorded."""
        nic = self._live(request, pod_uid)
        if nic is None:
            raise exceptions.NotFound(f"Pod {pod_uid} has no NIC in this cluster.")
        return Response(NicSerializer(nic).data)

    @extend_schema(
        responses={
            204: None,
            403: _error("The pod is another cluster's."),
            409: _error("Refused: whitesky refused the detach (the answer says why)."),
            503: _BUSY,
        }
    )
    def delete(self, request: Request, pod_uid: str) -> Response:
        """DEL: detach and release the pod's NIC; 204 also when it has none."""
        try:
            pod_nic_delete(cluster=self.agent(request).cluster, pod_uid=pod_uid)
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)
