"""The agent API: what the nodes of a cluster call.

    POST   /api/v1/sriov/agent/enroll/          the installer: its node's token, for the
                                                cluster's enrollment token
    POST   /api/v1/sriov/agent/nics/            ADD: the attachment's NIC (200), or its
                                                request queued on the VM (202)
    GET    /api/v1/sriov/agent/nics/<pod uid>/?container_id=&ifname=
                                                CHECK, and the poll of a queued ADD: the
                                                attachment's NIC as recorded (202 while
                                                queued)
    DELETE /api/v1/sriov/agent/nics/<pod uid>/?container_id=&ifname=
                                                DEL: detached and released (idempotent)
    POST   /api/v1/sriov/agent/gc/              GC: the node's NICs of attachments the
                                                runtime no longer lists, released

An attachment is (container id, ifname), as the CNI spec keys it: a DEL that names
another sandbox of the pod than the one holding its NIC changes nothing.

The NIC calls take a node token (`Authorization: Bearer cvsriov_...`), bound to one node
of one cluster: they act only for pods on that node. What belongs to another cluster is
answered as what does not exist.

Authentication and limits of its own (not the API's): the token is checked first, so a
valid one is never refused for others' failures from its address; refused tokens are
counted per address (SRIOV_AGENT_RATE_FAILED_AUTH, past it 429 for refused tokens only),
and calls per token (SRIOV_AGENT_RATE).

ADD never waits for the VM: it checks the pod and its node (the mirror, else the cluster's
Kubernetes), records the request and answers at once, the NIC when it is attached, else
202 with the request, its place in the VM's queue and when to ask again: `retry_after_ms`
in the body (from its place and the VM's recent attach time) and `Retry-After` (whole
seconds, as HTTP has it); the VM's queue task attaches it. The plugin polls with GET
(the same answers: 202 while queued, 200 once attached or failed, `failure_code` and
`failure` saying why) and ADDs again only after a failure worth trying again
(`whitesky_unavailable`). DEL of a queued request cancels it; DEL of an attached NIC
detaches it under the VM's turn while the request waits.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from capvco_web.api import ErrorSerializer, StrictInputMixin
from capvco_web.auth import FailedTokenThrottle, RateFromSettings, client_address
from capvco_web.tasks import send_on_commit
from sriov.agent import (
    POLL_AFTER_MIN_MS,
    QueuePlace,
    Refused,
    is_queued,
    nic_of_node,
    node_nics_gc,
    pod_nic_add,
    pod_nic_delete,
    poll_after,
    queue_place,
)
from sriov.models import AGENT_TOKEN_PREFIX, AgentToken, PodNic
from sriov.tasks import sriov_vm_queue_run
from sriov.tokens import AgentTokenRefused, agent_token_authenticate, node_token_enroll

POD_UID_PATTERN = r"^[A-Za-z0-9-]{1,64}\Z"
_POD_UID = re.compile(POD_UID_PATTERN)
# As the CNI spec (and libcni) allow them.
CONTAINER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z"
IFNAME_PATTERN = r"^(?!\.{1,2}\Z)[^/:\s]{1,15}\Z"
MAX_VALID_ATTACHMENTS = 10_000


class Agent:
    """Who calls: a node of one cluster (node token), or the cluster's installers before
    they have one (enrollment token). Not a person."""

    is_authenticated = True
    is_active = True
    is_superuser = False
    is_staff = False
    pk = None

    def __init__(self, token: AgentToken) -> None:
        self.token = token
        self.cluster = token.cluster
        self.node_name = token.node_name

    def get_username(self) -> str:
        if self.node_name:
            return f"sriov-agent of node {self.node_name} of {self.cluster.name}"
        return f"sriov-installer of {self.cluster.name}"


class _AgentRate(RateFromSettings):
    def get_rate(self) -> str | None:
        # Absent (a test's or a fuzzer's rates): not throttled.
        rates: dict[str, Any] = api_settings.DEFAULT_THROTTLE_RATES
        rate: str | None = rates.get(str(self.scope))
        return rate


class AgentFailedTokenThrottle(_AgentRate, FailedTokenThrottle):
    """SRIOV_AGENT_RATE_FAILED_AUTH: refused agent tokens per address, counted apart from
    the API's refused tokens. Past it a refused token answers 429, a valid one still
    its answer."""

    scope = "sriov_agent_failed_auth"


class AgentTokenRateThrottle(_AgentRate):
    """SRIOV_AGENT_RATE: calls per node token; per enrollment token and address (the
    nodes of a cluster share the enrollment token, and enroll at once after a rotation)."""

    scope = "sriov_agent"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        token = request.auth
        if not isinstance(token, AgentToken):
            return None
        ident = token.key_id if token.node_name else f"{token.key_id}:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AgentTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Agent, AgentToken] | None:
        words = get_authorization_header(request).split()
        if len(words) != 2 or words[0].lower() != b"bearer":
            raise exceptions.NotAuthenticated("The agent API needs 'Bearer <agent token>'.")
        try:
            token = agent_token_authenticate(words[1].decode("ascii", errors="replace"))
        except AgentTokenRefused as exc:
            throttle = AgentFailedTokenThrottle()
            wait = throttle.wait_needed(request)
            if wait is not None:
                raise exceptions.Throttled(
                    wait, detail="Too many refused agent tokens from your address."
                ) from None
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


class IsNodeAgent(permissions.BasePermission):
    message = (
        "This is the cluster's enrollment token: it only enrolls a node "
        "(POST /api/v1/sriov/agent/enroll/). The CNI plugin calls with its node's token."
    )

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Agent) and bool(request.user.node_name)


class IsInstaller(permissions.BasePermission):
    message = "Nodes enroll with the cluster's enrollment token (the Secret's), not a node token."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Agent) and not request.user.node_name


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
    node_name = serializers.CharField(
        max_length=253, required=False, help_text="The token's node, if named: GC is for it"
    )
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
    detaching = serializers.ListField(
        child=serializers.CharField(),
        help_text="Their detach queued on their VM: made in its turn, after what was asked "
        "for before it",
    )


class NicSerializer(serializers.ModelSerializer[PodNic]):
    """The NIC as the plugin configures it, or its request while queued."""

    address = serializers.IPAddressField(source="ip", allow_null=True)
    prefix = serializers.IntegerField(source="prefix_len", allow_null=True)
    network = serializers.CharField(source="network_name")
    failure_code = serializers.CharField(
        read_only=True,
        help_text="Why the request failed (state `failed`), or why its queued detach did "
        "(a live state): whitesky_refused, whitesky_unavailable (worth an ADD or DEL "
        "again), sriov_disabled; empty otherwise",
    )
    queue_position = serializers.SerializerMethodField(
        help_text="Its place in its VM's queue (1: attached or detached next, or now); null "
        "unless queued"
    )
    retry_after_ms = serializers.SerializerMethodField(
        help_text="Milliseconds until the plugin asks again, from its place and the VM's "
        "recent attach time: finer than the Retry-After header (whole seconds), which "
        "other clients keep to; null unless queued"
    )

    class Meta:
        model = PodNic
        fields = [
            "pod_uid", "namespace", "pod_name", "node_name", "container_id", "ifname", "vm_id",
            "network_id", "network",
            "state", "mac", "address", "prefix", "gateway", "mtu", "failure", "failure_code",
            "queue_position", "retry_after_ms",
        ]  # fmt: skip
        read_only_fields = fields

    def get_queue_position(self, row: PodNic) -> int | None:
        position: int | None = self.context.get("queue_position")
        return position

    def get_retry_after_ms(self, row: PodNic) -> int | None:
        wait: int | None = self.context.get("retry_after_ms")
        return wait


def _nic_answer(nic: PodNic, *, send: bool = False) -> Response:
    """200 with the NIC; 202 with the request, its place and its waits (Retry-After, and
    `retry_after_ms` finer) while queued: its attach, or its detach. With `send`, the VM's
    queue task is sent when the request is first in its queue; one further back needs
    none: the run sent for the first goes on until the queue is empty (vm_queue_run)."""
    if not is_queued(nic):
        return Response(NicSerializer(nic).data)
    # Not in the queue a moment after it was read (attached or cancelled meanwhile): as
    # if first.
    place = queue_place(nic) or QueuePlace(position=1, retry_after_ms=POLL_AFTER_MIN_MS)
    if send and place.position == 1:
        send_on_commit(sriov_vm_queue_run, nic.location_id, nic.vm_id)
    context = {"queue_position": place.position, "retry_after_ms": place.retry_after_ms}
    body = NicSerializer(nic, context=context).data
    return Response(
        body,
        status=status.HTTP_202_ACCEPTED,
        headers={"Retry-After": str(poll_after(place.position))},
    )


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


_BUSY = _error("The VM's queue or whitesky is busy: try again after Retry-After.")
_RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    int,
    OpenApiParameter.HEADER,
    response=[202, 503],
    description="Seconds until the plugin asks again.",
)


def _queued(description: str) -> OpenApiResponse:
    return OpenApiResponse(NicSerializer, description=description)


class EnrollSerializer(StrictInputMixin, serializers.Serializer[Any]):
    node_name = serializers.CharField(max_length=253)
    current_token = serializers.CharField(
        max_length=128,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        write_only=True,
        help_text="The node's token, when it has one: needed to enroll a node again.",
    )


class EnrolledSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(help_text="Shown this once: it is kept only as a hash.")
    prefix = serializers.CharField()
    node_name = serializers.CharField()


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [AgentTokenRateThrottle]

    def agent(self, request: Request) -> Agent:
        user = request.user
        assert isinstance(user, Agent)
        return user


class AgentEnrollView(AgentView):
    permission_classes = [IsInstaller]

    @extend_schema(
        request=EnrollSerializer,
        responses={
            201: EnrolledSerializer,
            403: _error("A node token: nodes enroll with the cluster's enrollment token."),
            409: _error(
                "Refused: the node is no machine of the cluster, or it enrolled already and "
                "its current token was not given."
            ),
            503: _BUSY,
        },
    )
    def post(self, request: Request) -> Response:
        """The installer of a node: a token bound to that node, for the cluster's
        enrollment token (shown in this answer only). Audited."""
        asked = EnrollSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        data = asked.validated_data
        try:
            token, raw = node_token_enroll(
                enrollment=self.agent(request).token,
                node_name=data["node_name"],
                current_token=data.get("current_token", ""),
                address=client_address(request),
            )
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        body = {
            "token": raw,
            "prefix": f"{AGENT_TOKEN_PREFIX}{token.key_id}",
            "node_name": token.node_name,
        }
        return Response(EnrolledSerializer(body).data, status=status.HTTP_201_CREATED)


class AgentNicsView(AgentView):
    @extend_schema(
        request=AddSerializer,
        parameters=[_RETRY_AFTER],
        responses={
            200: NicSerializer,
            202: _queued(
                "Queued on the VM (`queue_position`); poll with GET after `retry_after_ms` "
                "(clients that read only the header: Retry-After seconds)."
            ),
            403: _error(
                "The token is another node's, or the pod runs on another node (or the token "
                "is the enrollment token)."
            ),
            404: _error("No such pod in the cluster (a pod of another cluster is none)."),
            409: _error(
                "Refused: SR-IOV off, the node is no machine of the cluster, whitesky "
                "refused the attach (the answer says why; the VM is never stopped)."
            ),
            503: _BUSY,
        },
    )
    def post(self, request: Request) -> Response:
        """ADD: the pod's NIC when it has one; else its request, queued on the VM."""
        asked = AddSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        data = asked.validated_data
        agent = self.agent(request)
        if data["node_name"] != agent.node_name:
            raise _other_node(agent, data["node_name"])
        try:
            nic = pod_nic_add(
                cluster=agent.cluster,
                pod_uid=data["pod_uid"],
                namespace=data["namespace"],
                pod_name=data["pod_name"],
                node_name=agent.node_name,
                container_id=data["container_id"],
                ifname=data["ifname"],
                cni_network=data.get("cni_network", ""),
            )
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        return _nic_answer(nic, send=True)


def _pod_uid_checked(pod_uid: str) -> str:
    if not _POD_UID.match(pod_uid):
        raise exceptions.NotFound(
            "Not a pod uid: a pod uid is letters, digits and '-', at most 64.", code="not_found"
        )
    return pod_uid


def _attachment(request: Request) -> dict[str, str]:
    asked = AttachmentSerializer(data=request.query_params.dict())
    asked.is_valid(raise_exception=True)
    return dict(asked.validated_data)


def _other_node(agent: Agent, node_name: str) -> exceptions.PermissionDenied:
    return exceptions.PermissionDenied(
        f"This agent token is node {agent.node_name}'s: it asks for pods on that node "
        f"only, not on {node_name}.",
        code="other_node",
    )


_NIC_PARAMETERS = [
    OpenApiParameter(
        "pod_uid",
        str,
        OpenApiParameter.PATH,
        required=True,
        pattern="^[A-Za-z0-9-]{1,64}$",
        description="The pod's uid (K8S_POD_UID); anything else answers 404.",
    ),
    OpenApiParameter("container_id", str, required=True, description="CNI_CONTAINERID"),
    OpenApiParameter("ifname", str, required=True, description="CNI_IFNAME"),
]


class AgentNicView(AgentView):
    serializer_class = NicSerializer  # what CHECK answers; DEL takes no body

    @extend_schema(
        parameters=[*_NIC_PARAMETERS, _RETRY_AFTER],
        responses={
            200: NicSerializer,
            202: _queued(
                "Still queued on the VM: ask again after `retry_after_ms` (or Retry-After seconds)."
            ),
            400: _error("No container_id or ifname named."),
            403: _error("Another node's VM holds the pod's NIC."),
            404: _error("The attachment holds no live NIC in the cluster (or that is no pod uid)."),
        },
    )
    def get(self, request: Request, pod_uid: str) -> Response:
        """CHECK, and the poll of a queued ADD: the attachment's live NIC as recorded
        (202 while its request is queued; a failed one says why in `failure_code`)."""
        agent = self.agent(request)
        _pod_uid_checked(pod_uid)
        key = _attachment(request)
        try:
            nic = nic_of_node(
                cluster=agent.cluster, node_name=agent.node_name, pod_uid=pod_uid, **key
            )
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        if nic is None:
            raise exceptions.NotFound(
                f"Pod {pod_uid} has no NIC for container {key['container_id']} and "
                f"interface {key['ifname']} in this cluster."
            )
        return _nic_answer(nic)

    @extend_schema(
        parameters=[*_NIC_PARAMETERS, _RETRY_AFTER],
        responses={
            202: _queued(
                "Its detach is queued on the VM (`queue_position`): poll with GET after "
                "`retry_after_ms` (or Retry-After seconds) until it answers 404 (released); "
                "a 200 says the detach failed (`failure_code`, `failure`)."
            ),
            204: None,
            400: _error("No container_id or ifname named."),
            403: _error("Another node's VM holds the pod's NIC: nothing was changed."),
            404: _error("That is no pod uid."),
        },
    )
    def delete(self, request: Request, pod_uid: str) -> Response:
        """DEL: queue the detach of the attachment's NIC on its VM (202, never waited for
        here); 204 when it holds none (also once released) or when its request was still
        queued (cancelled: nothing was sent)."""
        agent = self.agent(request)
        _pod_uid_checked(pod_uid)
        key = _attachment(request)
        try:
            nic = pod_nic_delete(
                cluster=agent.cluster,
                node_name=agent.node_name,
                pod_uid=pod_uid,
                container_id=key["container_id"],
                ifname=key["ifname"],
            )
        except Refused as exc:
            raise AgentRefusal(exc) from exc
        if nic is None or not is_queued(nic):
            return Response(status=status.HTTP_204_NO_CONTENT)
        return _nic_answer(nic, send=True)


class AgentGcView(AgentView):
    @extend_schema(
        request=GcSerializer,
        responses={
            200: GcAnswerSerializer,
            403: _error("The body names another node than the token's: nothing was changed."),
        },
    )
    def post(self, request: Request) -> Response:
        """GC (CNI 1.1): queue the detach of the token's node's NICs whose attachment is not
        among the valid ones (never waited for here), except those still attaching or asked
        for within the reclaim grace."""
        asked = GcSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        data = asked.validated_data
        agent = self.agent(request)
        if data.get("node_name", agent.node_name) != agent.node_name:
            raise _other_node(agent, data["node_name"])
        result = node_nics_gc(
            cluster=agent.cluster,
            node_name=agent.node_name,
            cni_network=data["cni_network"],
            valid=[(a["container_id"], a["ifname"]) for a in data["valid_attachments"]],
        )
        for location_id, vm_id in result.vms:
            send_on_commit(sriov_vm_queue_run, location_id, vm_id)

        def named(rows: list[PodNic]) -> list[str]:
            return [f"{row} ({row.container_id}/{row.ifname})" for row in rows]

        return Response(
            {
                "released": named(result.released),
                "kept": named(result.kept),
                "failed": [],
                "detaching": named(result.detaching),
            }
        )
