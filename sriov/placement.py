"""Where a pod runs, as the agent API must know it before attaching anything: the pod is
the cluster's, it runs on the node that asks, and that node is a machine of the cluster
(whose VM gets the NIC).

The mirror answers first; a pod or node it does not know yet (a pod scheduled a moment
ago, a node that just joined) is read from the cluster's Kubernetes API. The VM is never
taken from the caller: only from the node's machine.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capvco_web.integrations import kube
from cloud.models import Location
from clusters.models import Cluster, Machine
from kube.models import KubeNode, KubePod
from kube.nodes import NodeOwners

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

# The cluster's Kubernetes client, for a `with` block, when the mirror cannot answer (the
# kubernetes package is slow to import: only then).
KubeClientFactory = Callable[[], AbstractContextManager["KubeClient"]]


def shared_kube(cluster: Cluster) -> KubeClientFactory:
    """The process's client of the cluster (kube_client_shared), left open after the block:
    the next request uses its connection again."""

    def use() -> AbstractContextManager[KubeClient]:
        from kube.client import kube_client_shared  # imports the kubernetes package

        return nullcontext(kube_client_shared(cluster))

    return use


FINISHED_PHASES = (KubePod.Phase.SUCCEEDED, KubePod.Phase.FAILED)


class Refused(Exception):
    """The agent's request is refused; `status` is the HTTP status that says why."""

    status = 409
    code = "refused"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class WrongNode(Refused):
    status = 403
    code = "other_node"


class PodUnknown(Refused):
    status = 404
    code = "pod_unknown"


class CannotConfirm(Refused):
    """Kubernetes could not be asked: nothing is decided, the caller tries again."""

    status = 503
    code = "kubernetes_unavailable"
    retry_after = 5


@dataclass(frozen=True)
class Placement:
    machine: Machine
    location: Location
    cloudspace_id: str
    vm_id: int


def pod_check(
    *,
    cluster: Cluster,
    pod_uid: str,
    namespace: str,
    pod_name: str,
    node_name: str,
    kube_client: KubeClientFactory,
) -> None:
    """Refuse unless the pod `pod_uid` (`namespace/pod_name`) is this cluster's, runs on
    `node_name`, and has not finished. Only this cluster is asked: a pod of another
    cluster is unknown here, as a pod that does not exist (its cluster is never named)."""
    mirrored = KubePod.objects.filter(cluster=cluster, uid=pod_uid).first()
    if mirrored is not None and mirrored.node_name:
        node, phase = mirrored.node_name, mirrored.phase
    else:
        pod = _live_pod(cluster, namespace, pod_name, kube_client)
        if pod.uid != pod_uid:
            raise PodUnknown(
                f"Pod {namespace}/{pod_name} of cluster {cluster.name} has uid {pod.uid}, "
                f"not {pod_uid}: it was replaced."
            )
        node, phase = pod.node_name, pod.phase
    if node != node_name:
        where = f"runs on node {node}" if node else "is not scheduled on any node"
        raise WrongNode(
            f"Pod {namespace}/{pod_name} ({pod_uid}) {where}, not on {node_name}: a node "
            "asks only for its own pods."
        )
    if phase in FINISHED_PHASES:
        raise Refused(f"Pod {namespace}/{pod_name} has finished ({phase}): it gets no NIC.")


def _live_pod(
    cluster: Cluster, namespace: str, name: str, kube_client: KubeClientFactory
) -> kube.Pod:
    try:
        with kube_client() as client:
            return client.get_pod(namespace=namespace, name=name)
    except kube.NotFound:
        raise PodUnknown(
            f"Cluster {cluster.name} has no pod {namespace}/{name} (its Kubernetes API says so)."
        ) from None
    except (kube.KubeError, kube.KubeconfigInvalid) as exc:
        raise CannotConfirm(
            f"Cannot confirm pod {namespace}/{name} with the Kubernetes API of cluster "
            f"{cluster.name}: {exc}"
        ) from exc


def node_placement(
    *, cluster: Cluster, node_name: str, kube_client: KubeClientFactory
) -> Placement:
    """The machine (and VM) of the cluster's node `node_name`: a mirrored node's read with
    it in one query."""
    row = (
        KubeNode.objects.select_related("machine__pool__site__location", "machine__deletion")
        .filter(cluster=cluster, name=node_name)
        .first()
    )
    machine = row.machine if row is not None else None
    if row is None and (machine_id := _live_node_machine(cluster, node_name, kube_client)):
        machine = (
            Machine.objects.select_related("pool__site__location", "deletion")
            .filter(pk=machine_id)
            .first()
        )
    if machine is None:
        raise Refused(
            f"Node {node_name} is no machine of cluster {cluster.name}: only the VMs of its "
            "pools get NICs."
        )
    if machine.vm_id is None or machine.deletion_asked:
        raise Refused(f"Node {node_name}'s machine {machine.name} has no VM to attach to now.")
    site = machine.pool.site
    return Placement(
        machine=machine,
        location=site.location,
        cloudspace_id=site.cloudspace_id,
        vm_id=machine.vm_id,
    )


def _live_node_machine(
    cluster: Cluster, node_name: str, kube_client: KubeClientFactory
) -> int | None:
    try:
        with kube_client() as client:
            node = client.get_node(name=node_name)
    except kube.NotFound:
        raise Refused(f"Cluster {cluster.name} has no node {node_name}.") from None
    except (kube.KubeError, kube.KubeconfigInvalid) as exc:
        raise CannotConfirm(
            f"Cannot read node {node_name} from the Kubernetes API of cluster {cluster.name}: {exc}"
        ) from exc
    owner = NodeOwners.load(cluster).owner(name=node.name, provider_id=node.provider_id)
    return owner.pk if owner else None
