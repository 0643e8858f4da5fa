"""A person's request that a node's GPUs be verified again: what refuses it, and the
request recorded and audited. The cluster's plan starts a verification for it
(kube.plan); this module writes the request and nothing else."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.permissions import permission_require
from kube.models import GpuVerification, GpuVerifyRequest, KubeNode


class VerifyRefused(Exception):
    """The request cannot be taken as things stand: the message says why."""


def gpu_verify_request(
    *, node: KubeNode, actor: User | AnonymousUser, reason: str
) -> GpuVerifyRequest:
    """Record a person's request that the node's GPUs be verified again, and audit it: a
    Job will hold all the node's GPUs while it runs."""
    if not isinstance(actor, User):
        raise ValueError("A verification request needs a signed-in person.")
    permission_require(actor, "kube.verify_kubenode", node)
    reason = reason.strip()
    if not reason:
        raise ValueError("A verification request needs a reason.")
    if not settings.GPU_VERIFY:
        raise VerifyRefused("GPU verification is off (GPU_VERIFY): no Job would run.")
    machine = node.machine
    if machine is None or not machine.pool.wants_gpus:
        raise VerifyRefused(f"{node.name} is not a node of a GPU pool: it has no GPUs to verify.")
    if node.gpu_allocatable == 0:
        raise VerifyRefused(
            f"{node.name} advertises no nvidia.com/gpu: a pod cannot be given its GPUs yet."
        )
    if GpuVerification.objects.filter(
        cluster_id=node.cluster_id,
        node_uid=node.uid,
        status__in=GpuVerification.UNFINISHED,
    ).exists():
        raise VerifyRefused(f"{node.name} is being verified now; its verdict follows.")
    if GpuVerifyRequest.objects.filter(
        cluster_id=node.cluster_id, node_uid=node.uid, verification__isnull=True
    ).exists():
        raise VerifyRefused(
            f"{node.name}: a verification was asked for already; a worker starts it."
        )
    request = GpuVerifyRequest.objects.create(
        cluster_id=node.cluster_id,
        node_name=node.name,
        node_uid=node.uid,
        requested_by=actor,
        reason=reason,
        requested_at=timezone.now(),
    )
    audit_record(
        actor=actor,
        action="kube_node.gpu_verify_request",
        obj=node,
        reason=reason,
        after={"node": node.name, "node_uid": node.uid},
    )
    return request
