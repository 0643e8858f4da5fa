"""The GPU add-on of a cluster: the NVIDIA device plugin, applied to its Kubernetes.

On (`Cluster.gpu_addon`), the workload cluster gets one DaemonSet,
`kube-system/capvco-nvidia-device-plugin`, made here: the image
`GPU_DEVICE_PLUGIN_IMAGE` (pinned), on the nodes that carry a `capvco.io/gpu-type` label
(`clusters.gpu_nodes`), tolerating GPU taints. The device plugin makes the node advertise
its GPUs as `nvidia.com/gpu`; it installs no driver: the VM image, or its first boot with
the pool's `driverVersion` (`clusters.cloud_init`), does.

Idempotent: the DaemonSet carries the hash of the manifest it was made from
(`capvco.io/manifest-sha256`); each pass reads it (one GET) and writes only when the hash
differs (a new image, a DaemonSet someone changed) or it is missing (created again). Off:
our DaemonSet is deleted, once, and nothing more is asked of the cluster. A DaemonSet of
that name that we did not make (no `app.kubernetes.io/managed-by: capvco-web`) is never
replaced nor deleted: the cluster shows why (`gpu_addon_error`).

Applying and removing it are audited (actor `gpu-addon`): they change software that runs
on every GPU node of someone's cluster.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.counters import count
from capvco_web.integrations import kube
from capvco_web.rows import model_update
from clusters.gpu_nodes import GPU_TYPE_LABEL
from clusters.models import Cluster

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

logger = logging.getLogger(__name__)

ADDON_NAMESPACE = "kube-system"
ADDON_NAME = "capvco-nvidia-device-plugin"
HASH_ANNOTATION = "capvco.io/manifest-sha256"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "capvco-web"
ACTOR = SystemActor.GPU_ADDON
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# The label that turns the add-on on for an imported cluster (on its Cluster API Cluster).
CAPI_GPU_LABEL = "capvco.infrastructure.cluster.x-k8s.io/gpu"
CAPI_GPU_LABEL_VALUE = "nvidia"


def device_plugin_daemonset(*, image: str) -> dict[str, Any]:
    """The DaemonSet of the device plugin, as NVIDIA's static manifest has it, on the nodes
    that carry a GPU type label (any value: `Exists`, which a nodeSelector cannot say)."""
    selector = {
        "app.kubernetes.io/name": "nvidia-device-plugin",
        "app.kubernetes.io/instance": ADDON_NAME,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": ADDON_NAME,
            "namespace": ADDON_NAMESPACE,
            "labels": {**selector, MANAGED_BY_LABEL: MANAGED_BY},
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": GPU_TYPE_LABEL, "operator": "Exists"}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    ],
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": image,
                            "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "device-plugin", "mountPath": DEVICE_PLUGIN_DIR}
                            ],
                        }
                    ],
                    "volumes": [{"name": "device-plugin", "hostPath": {"path": DEVICE_PLUGIN_DIR}}],
                },
            },
        },
    }


def manifest_hash(manifest: dict[str, Any]) -> str:
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def addon_manifest() -> tuple[dict[str, Any], str]:
    """The DaemonSet to apply, annotated with the hash of what it was made from."""
    manifest = device_plugin_daemonset(image=settings.GPU_DEVICE_PLUGIN_IMAGE)
    digest = manifest_hash(manifest)
    manifest["metadata"]["annotations"] = {HASH_ANNOTATION: digest}
    return manifest, digest


@dataclass
class AddonResult:
    action: str = "none"
    """none (nothing to do), created, replaced, removed, or refused."""
    error: str = ""


def _ours(found: Mapping[str, Any]) -> bool:
    labels = (found.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


def cluster_gpu_addon_reconcile(*, client: KubeClient, cluster: Cluster) -> AddonResult:
    """Make the cluster's Kubernetes hold the add-on when it is on, and not when it is off.
    A cluster that never had ours and does not want it costs no call."""
    if not cluster.gpu_addon and not cluster.gpu_addon_hash:
        return AddonResult()
    result = AddonResult()
    digest = ""
    try:
        found = client.read_daemonset(ADDON_NAMESPACE, ADDON_NAME)
        if cluster.gpu_addon:
            manifest, digest = addon_manifest()
            if found is None:
                client.create_daemonset(ADDON_NAMESPACE, manifest)
                result.action = "created"
            elif not _ours(found):
                result.action = "refused"
                result.error = (
                    f"A DaemonSet {ADDON_NAMESPACE}/{ADDON_NAME} exists that capvco-web did "
                    f"not make (no label {MANAGED_BY_LABEL}: {MANAGED_BY}): it is left alone; "
                    "remove it for the add-on to be applied."
                )
            elif (found["metadata"].get("annotations") or {}).get(HASH_ANNOTATION) != digest:
                manifest["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
                client.replace_daemonset(ADDON_NAMESPACE, ADDON_NAME, manifest)
                result.action = "replaced"
        elif found is not None and _ours(found):
            client.delete_daemonset(ADDON_NAMESPACE, ADDON_NAME)
            result.action = "removed"
    except kube.KubeError as exc:
        result.error = f"GPU add-on: {exc}"
    _record(cluster, result, digest)
    return result


def _record(cluster: Cluster, result: AddonResult, digest: str) -> None:
    now = timezone.now()
    fields: dict[str, Any] = {"gpu_addon_error": result.error[:1000]}
    if result.action in ("created", "replaced"):
        fields.update(gpu_addon_hash=digest, gpu_addon_applied_at=now)
    elif result.action == "none" and cluster.gpu_addon and not result.error:
        # Found as it should be: applied (by an earlier pass whose answer was lost, say).
        fields.update(
            gpu_addon_hash=digest, gpu_addon_applied_at=cluster.gpu_addon_applied_at or now
        )
    elif result.action == "removed" or (
        result.action == "none" and not cluster.gpu_addon and not result.error
    ):
        fields.update(gpu_addon_hash="", gpu_addon_applied_at=None)
    model_update(cluster, fields)
    if result.error:
        count("kube_writes", "gpu_addon", "error")
        logger.warning("kubernetes of %s: %s", cluster.name, result.error)
        return
    if result.action == "none":
        return
    count("kube_writes", "gpu_addon", result.action)
    logger.info("GPU add-on of %s: %s", cluster.name, result.action)
    where = {"daemonset": f"{ADDON_NAMESPACE}/{ADDON_NAME}"}
    applied = {**where, "image": settings.GPU_DEVICE_PLUGIN_IMAGE, "sha256": digest}
    audit_record(
        actor=ACTOR,
        action="cluster.gpu_addon_remove"
        if result.action == "removed"
        else "cluster.gpu_addon_apply",
        obj=cluster,
        reason="the cluster's GPU add-on is off"
        if result.action == "removed"
        else "the cluster's GPU add-on is on",
        before=where if result.action != "created" else None,
        after=applied if result.action != "removed" else None,
    )
