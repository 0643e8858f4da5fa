"""The SR-IOV add-on: the control plane applies the node manifests to the workload
cluster itself (`SriovConfig.install_node_side`), with the token it has just made."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from capvco_web.audit import audit_record
from capvco_web.integrations import kube
from capvco_web.permissions import Actor
from clusters.models import Cluster

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient


def _cluster_client(cluster: Cluster) -> KubeClient:
    from kube.client import kube_client

    return kube_client(cluster)


def node_side_apply(
    *,
    cluster: Cluster,
    objects: list[dict[str, Any]],
    actor: Actor,
    client: Callable[[Cluster], KubeClient] = _cluster_client,
) -> str:
    """Create or replace each object in the cluster; "" when all were applied, else what
    failed (the rest is not tried). Audited with the objects' names, never the token."""
    names = [
        f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in objects
    ]
    error = ""
    try:
        with client(cluster) as api:
            for obj in objects:
                api.apply(obj)
    except (kube.KubeError, kube.KubeconfigInvalid) as exc:
        error = f"Applying the node manifests to {cluster.name}: {exc}"
    audit_record(
        actor=actor,
        action="sriov.node_side_apply",
        obj=cluster,
        after={"objects": names, "applied": not error, "error": error},
    )
    return error
