"""What the Kubernetes API answers, as frozen dataclasses, read from the JSON of a listing.

Parsing is lenient about what we only show (a node without a Ready condition is not
ready, a pod without a phase is `Unknown`) and strict about identity (a node without a
name, a pod without a uid is an `UnexpectedResponse`): a row we cannot key we cannot
mirror, nor judge gone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .errors import KubeError, UnexpectedResponse

T = TypeVar("T")
Json = Mapping[str, Any]

GPU_RESOURCE = "nvidia.com/gpu"
# The labels the control plane keeps on a GPU node: its GPUs' type (a label value, e.g.
# `nvidia-a100`) and how many it has (docs/guides/gpu.md).
GPU_TYPE_LABEL = "capvco.io/gpu-type"
GPU_COUNT_LABEL = "capvco.io/gpu-count"
MAX_LABEL_VALUE = 63
_NOT_IN_LABEL = re.compile(r"[^a-z0-9]+")


def gpu_label_value(gpu_type: str) -> str:
    """A GPU type as a label value: lowercase letters and digits, runs of anything else a
    single dash, at most 63 characters ("NVIDIA A100-SXM4 80GB" → `nvidia-a100-sxm4-80gb`)."""
    value = _NOT_IN_LABEL.sub("-", gpu_type.lower()).strip("-")
    return value[:MAX_LABEL_VALUE].rstrip("-")


# A label key (Kubernetes' qualified name): an optional prefix, a DNS subdomain of at most
# 253 characters, and `/`; then a name of 1 to 63 letters, digits, `-`, `_` and `.` that
# starts and ends with a letter or digit. The API's schema states it as this pattern.
_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY_NAME = "[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY_PATTERN = rf"^(?:(?=[^/]{{1,253}}/){_SUBDOMAIN}/)?{_KEY_NAME}$"
LABEL_KEY_MAX = 253 + 1 + 63


def label_key_problem(key: str) -> str:
    """What is wrong with `key` as a label key, naming the part ("": nothing)."""
    if len(key) <= LABEL_KEY_MAX and re.fullmatch(LABEL_KEY_PATTERN, key):
        return ""
    if not key:
        return "Give a label key, e.g. team or example.com/team."
    if len(key) > LABEL_KEY_MAX:
        return f"A label key has at most {LABEL_KEY_MAX} characters, not {len(key)}."
    prefix, slash, _ = key.partition("/")
    if slash and not (len(prefix) <= 253 and re.fullmatch(_SUBDOMAIN, prefix)):
        return (
            f"{key!r} is not a label key: its prefix before '/' must be a DNS subdomain of "
            "at most 253 characters (lowercase letters, digits, '-' and '.')."
        )
    after = " after '/'" if slash else ""
    return (
        f"{key!r} is not a label key: its name{after} must be 1 to 63 letters, digits, "
        "'-', '_' or '.', starting and ending with a letter or digit."
    )


# The annotation a pod asks for an SR-IOV NIC with: the external network, as
# docs/guides/kubernetes.md says.
SRIOV_NETWORK_ANNOTATION = "capvco.io/sriov-network"


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # a static pod, as its kubelet shows it


@dataclass(frozen=True)
class Listing(Generic[T]):
    """A listing that says whether it is whole.

    `complete` is False when a page failed (the error is in `error`: a timeout, a 5xx, an
    expired continue token), or an item could not be read; `items` then holds what was
    read, and no decision that assumes "absent means gone" may be taken from it.
    `resource_version` is the list's (of its first page: every page of one listing is
    of the same snapshot); `calls` how many requests it took.
    """

    items: tuple[T, ...]
    complete: bool
    error: KubeError | None = None
    resource_version: str = ""
    calls: int = 0


@dataclass(frozen=True)
class WatchEvent(Generic[T]):
    """One event of a watch: `type` ADDED, MODIFIED, DELETED (with `object`, as it is
    after the change, or as it was when deleted) or BOOKMARK (no object: only the
    resourceVersion the watch has reached). `resource_version` is where a watch resumes."""

    type: str
    object: T | None
    resource_version: str


@dataclass(frozen=True)
class Node:
    name: str
    uid: str
    provider_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_capacity: int = 0
    gpu_allocatable: int = 0
    ready: bool = False
    kubelet_version: str = ""
    unschedulable: bool = False
    """Cordoned (spec.unschedulable): the scheduler places no new pod on it."""


@dataclass(frozen=True)
class Pod:
    uid: str
    namespace: str
    name: str
    node_name: str
    phase: str
    gpu_requests: int = 0
    sriov_network: str = ""
    gpu_type: str = ""
    """The `capvco.io/gpu-type` its nodeSelector asks for ("": any GPU node)."""
    daemon: bool = False
    """A DaemonSet's pod or a static (mirror) pod: a node's drain leaves it, as kubectl
    drain --ignore-daemonsets does."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Its labels (not its annotations, which can be large): what its cost is attributed by."""


def _identity(obj: Json, *keys: str) -> list[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise UnexpectedResponse("an object without metadata")
    values = []
    for key in keys:
        value = meta.get(key)
        if not isinstance(value, str) or not value:
            raise UnexpectedResponse(f"an object without metadata.{key}")
        values.append(value)
    return values


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def quantity_count(value: Any) -> int:
    """A count of a device resource (`"2"`). Devices come whole; anything else is 0."""
    if isinstance(value, int):
        return max(value, 0)
    try:
        return max(int(str(value)), 0)
    except ValueError:
        return 0


def parse_node(obj: Json) -> Node:
    name, uid = _identity(obj, "name", "uid")
    status = _mapping(obj.get("status"))
    ready = any(
        isinstance(condition, Mapping)
        and condition.get("type") == "Ready"
        and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )
    return Node(
        name=name,
        uid=uid,
        provider_id=str(_mapping(obj.get("spec")).get("providerID") or ""),
        labels=_labels(obj),
        gpu_capacity=quantity_count(_mapping(status.get("capacity")).get(GPU_RESOURCE, 0)),
        gpu_allocatable=quantity_count(_mapping(status.get("allocatable")).get(GPU_RESOURCE, 0)),
        ready=ready,
        kubelet_version=str(_mapping(status.get("nodeInfo")).get("kubeletVersion") or ""),
        unschedulable=bool(_mapping(obj.get("spec")).get("unschedulable")),
    )


def _container_gpus(container: Any) -> int:
    """What a container asks: its request, or its limit (a device resource's request
    defaults to its limit)."""
    resources = _mapping(_mapping(container).get("resources"))
    requests = _mapping(resources.get("requests"))
    if GPU_RESOURCE in requests:
        return quantity_count(requests[GPU_RESOURCE])
    return quantity_count(_mapping(resources.get("limits")).get(GPU_RESOURCE, 0))


def pod_gpu_requests(spec: Json) -> int:
    """The GPUs a pod holds on its node, as the scheduler counts them: its containers
    together, or its largest init container if that asks more (they run one by one)."""
    running = sum(_container_gpus(c) for c in spec.get("containers") or [])
    init = max((_container_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(running, init)


@dataclass(frozen=True)
class Job:
    """A batch/v1 Job: its labels, and how it ended (`finished` is `Complete` or `Failed`
    once a condition of that type is True, with that condition's reason and message)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    finished: str = ""
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class PodRun:
    """A pod as a run of something: where and how far it got, and why it stopped or waits,
    in the words of whoever said so (the kubelet's admission, the scheduler, a container's
    state): `OutOfnvidia.com/gpu`, `ErrImagePull`, `Unschedulable`, `Error` (exit 9)..."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    node_name: str = ""
    phase: str = "Unknown"
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class Service:
    """A Service: the pods its selector picks, and the port they serve on (`targetPort` of
    its first port when a number, else its `port`)."""

    namespace: str
    name: str
    selector: Mapping[str, str]
    port: int


def parse_service(obj: Json) -> Service:
    namespace, name = _identity(obj, "namespace", "name")
    spec = _mapping(obj.get("spec"))
    ports = [_mapping(port) for port in spec.get("ports") or []]
    first = ports[0] if ports else {}
    target = first.get("targetPort")
    port = target if isinstance(target, int) else first.get("port")
    return Service(
        namespace=namespace,
        name=name,
        selector={str(k): str(v) for k, v in _mapping(spec.get("selector")).items()},
        port=int(port) if isinstance(port, int) else 0,
    )


def _labels(obj: Json) -> dict[str, str]:
    return {
        str(k): str(v) for k, v in _mapping(_mapping(obj.get("metadata")).get("labels")).items()
    }


def parse_job(obj: Json) -> Job:
    (name,) = _identity(obj, "name")
    finished = reason = message = ""
    for condition in _mapping(obj.get("status")).get("conditions") or []:
        condition = _mapping(condition)
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            finished = str(condition["type"])
            reason = str(condition.get("reason") or "")
            message = str(condition.get("message") or "")
    return Job(name=name, labels=_labels(obj), finished=finished, reason=reason, message=message)


def parse_pod_run(obj: Json) -> PodRun:
    (name,) = _identity(obj, "name")
    spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if not reason:
        reason, message = _stopped_container(status)
    if not reason:
        for condition in status.get("conditions") or []:
            condition = _mapping(condition)
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                reason = str(condition.get("reason") or "Unschedulable")
                message = str(condition.get("message") or "")
    return PodRun(
        name=name,
        labels=_labels(obj),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Unknown"),
        reason=reason,
        message=message,
    )


def _stopped_container(status: Json) -> tuple[str, str]:
    """The reason a container waits (an image not pulled) or ended badly, and its message."""
    for held in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        state = _mapping(_mapping(held).get("state"))
        waiting = _mapping(state.get("waiting"))
        if waiting.get("reason") and waiting.get("reason") != "ContainerCreating":
            return str(waiting["reason"]), str(waiting.get("message") or "")
        ended = _mapping(state.get("terminated"))
        if ended and ended.get("exitCode") not in (0, None):
            why = f"exit code {ended.get('exitCode')}"
            detail = str(ended.get("message") or "")
            return str(ended.get("reason") or "Error"), f"{why}: {detail}" if detail else why
    return "", ""


def parse_pod(obj: Json) -> Pod:
    namespace, name, uid = _identity(obj, "namespace", "name", "uid")
    spec = _mapping(obj.get("spec"))
    meta = _mapping(obj["metadata"])
    annotations = _mapping(meta.get("annotations"))
    owners = meta.get("ownerReferences") or []
    daemon = MIRROR_ANNOTATION in annotations or any(
        _mapping(owner).get("kind") == "DaemonSet" for owner in owners
    )
    return Pod(
        uid=uid,
        namespace=namespace,
        name=name,
        node_name=str(spec.get("nodeName") or ""),
        phase=str(_mapping(obj.get("status")).get("phase") or "Unknown"),
        gpu_requests=pod_gpu_requests(spec),
        sriov_network=str(annotations.get(SRIOV_NETWORK_ANNOTATION) or "").strip(),
        gpu_type=str(_mapping(spec.get("nodeSelector")).get(GPU_TYPE_LABEL) or "")[:63],
        daemon=daemon,
        labels=_labels(obj),
    )
