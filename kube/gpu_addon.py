"""The GPU add-on of a cluster: the NVIDIA device plugin, applied to its Kubernetes.

On (`Cluster.gpu_addon`), the workload cluster gets one DaemonSet,
`kube-system/capvco-nvidia-device-plugin`, made here: the image
`GPU_DEVICE_PLUGIN_IMAGE` (pinned), on the nodes that carry a `capvco.io/gpu-type` label
(`kube.gpu_nodes`), tolerating GPU taints. The device plugin makes the node advertise
its GPUs as `nvidia.com/gpu`; it installs no driver: the VM image, or its first boot with
the pool's `driverVersion` (`clusters.cloud_init`), does.

Idempotent: the DaemonSet carries the hash of the manifest it was made from
(`capvco.io/manifest-sha256`); observe reads it (one GET) and mirrors that hash on the
cluster, and the cluster's plan (`kube.plan`) writes only when it differs from
the manifest's (a new image, a DaemonSet someone changed) or ours is missing (created
again). A replace carries the resourceVersion observe read (optimistic concurrency): when
the DaemonSet changed since, the API server refuses it (409 Conflict), the step is
dropped and the next pass reads and plans again. Off: our DaemonSet is deleted, once, and
nothing more is asked of the cluster. A DaemonSet of that name that we did not make (no
`app.kubernetes.io/managed-by: capvco-web`) is never replaced nor deleted: the cluster
shows why (`GpuAddonState.error`).

Applying and removing it are audited (actor `gpu-addon`): they change software that runs
on every GPU node of someone's cluster.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.counters import count
from capvco_web.integrations import kube
from capvco_web.rows import model_update
from clusters.models import Cluster
from kube.gpu_nodes import GPU_TYPE_LABEL
from kube.models import GpuAddonState

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
# The hash mirrored for a DaemonSet of ours that carries none: never the manifest's.
UNHASHED = "none"


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


def _ours(found: Mapping[str, Any]) -> bool:
    labels = (found.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


def foreign_message() -> str:
    return (
        f"A DaemonSet {ADDON_NAMESPACE}/{ADDON_NAME} exists that capvco-web did "
        f"not make (no label {MANAGED_BY_LABEL}: {MANAGED_BY}): it is left alone; "
        "remove it for the add-on to be applied."
    )


READ_FAILED = "GPU add-on: cannot read the DaemonSet: "


def addon_state(cluster: Cluster) -> GpuAddonState:
    """What the cluster holds of the add-on as last recorded (unsaved and empty: nothing)."""
    try:
        return cluster.gpu_addon_state
    except GpuAddonState.DoesNotExist:
        return GpuAddonState(cluster=cluster)


def _addon_state_write(cluster: Cluster, fields: Mapping[str, Any]) -> None:
    """Record what the add-on's read or write found; only what changed is written, and a
    first row only when there is something to record."""
    state = addon_state(cluster)
    if not state._state.adding:
        model_update(state, fields)
    elif any(getattr(state, name) != value for name, value in fields.items()):
        for name, value in fields.items():
            setattr(state, name, value)
        state.save()
        cluster.gpu_addon_state = state


def addon_unjudged(cluster: Cluster) -> bool:
    """Whether observe could not judge what the cluster holds: the read failed, or found a
    DaemonSet that is not ours. A write that failed does not count: it is planned again."""
    error = addon_state(cluster).error
    return error == foreign_message() or error.startswith(READ_FAILED)


def cluster_gpu_addon_observe(*, client: KubeClient, cluster: Cluster) -> None:
    """Mirror what the cluster holds under the add-on's name (one GET) into its
    GpuAddonState: the hash of ours (`hash`, empty: none of ours), or why it cannot be
    judged (`error`: a DaemonSet not ours, or the read failed: `addon_unjudged`). The
    plan reads only this (`kube.plan`). A cluster that never had ours and does
    not want it costs no call."""
    state = addon_state(cluster)
    if not cluster.gpu_addon and not state.hash:
        return
    fields: dict[str, Any]
    try:
        found = client.read_daemonset(ADDON_NAMESPACE, ADDON_NAME)
    except kube.KubeError as exc:
        fields = {"error": f"{READ_FAILED}{exc}"[:1000]}
    else:
        if found is None:
            fields = {"hash": "", "applied_at": None, "error": "", "resource_version": ""}
        elif not _ours(found):
            # Theirs: never ours to replace, nor (the add-on off) to remove.
            refused = foreign_message() if cluster.gpu_addon else ""
            fields = {"hash": "", "error": refused, "resource_version": ""}
        else:
            held = (found["metadata"].get("annotations") or {}).get(HASH_ANNOTATION) or UNHASHED
            _, digest = addon_manifest()
            applied_at = state.applied_at
            if held == digest:
                # As it should be: applied (by an earlier pass whose answer was lost, say).
                applied_at = applied_at or timezone.now()
            fields = {
                "hash": held,
                "resource_version": _resource_version(found),
                "applied_at": applied_at,
                "error": "",
            }
    _addon_state_write(cluster, fields)
    if error := addon_state(cluster).error:
        logger.warning("kubernetes of %s: %s", cluster.name, error)


def _resource_version(found: Mapping[str, Any]) -> str:
    return str((found.get("metadata") or {}).get("resourceVersion") or "")


def addon_applied_record(
    *, cluster: Cluster, digest: str, created: bool, answer: Mapping[str, Any]
) -> None:
    """The add-on written: `answer` is the DaemonSet as the API server stored it."""
    _addon_state_write(
        cluster,
        {
            "hash": digest,
            "resource_version": _resource_version(answer),
            "applied_at": timezone.now(),
            "error": "",
        },
    )
    action = "created" if created else "replaced"
    count("kube_writes", "gpu_addon", action)
    logger.info("GPU add-on of %s: %s", cluster.name, action)
    where = {"daemonset": f"{ADDON_NAMESPACE}/{ADDON_NAME}"}
    audit_record(
        actor=ACTOR,
        action="cluster.gpu_addon_apply",
        obj=cluster,
        reason="the cluster's GPU add-on is on",
        before=None if created else where,
        after={**where, "image": settings.GPU_DEVICE_PLUGIN_IMAGE, "sha256": digest},
    )


def addon_removed_record(*, cluster: Cluster) -> None:
    _addon_state_write(
        cluster, {"hash": "", "resource_version": "", "applied_at": None, "error": ""}
    )
    count("kube_writes", "gpu_addon", "removed")
    logger.info("GPU add-on of %s: removed", cluster.name)
    audit_record(
        actor=ACTOR,
        action="cluster.gpu_addon_remove",
        obj=cluster,
        reason="the cluster's GPU add-on is off",
        before={"daemonset": f"{ADDON_NAMESPACE}/{ADDON_NAME}"},
    )


def addon_failed_record(*, cluster: Cluster, error: str) -> None:
    _addon_state_write(cluster, {"error": error[:1000]})
    count("kube_writes", "gpu_addon", "error")
    logger.warning("kubernetes of %s: %s", cluster.name, error)
