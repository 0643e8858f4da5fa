"""Server-side printing: nodes and pods as the `meta.k8s.io/v1` `Table` a real API server
answers when asked for one (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, what
`kubectl get` sends), with the columns of its printers (kubernetes/pkg/printers/internalversion):
nodes NAME, STATUS, ROLES, AGE, VERSION and, wide, INTERNAL-IP ... CONTAINER-RUNTIME; pods
NAME, READY, STATUS, RESTARTS, AGE and, wide, IP, NODE, NOMINATED NODE, READINESS GATES.

Other kinds are answered as before, as plain objects: kubectl then prints its default
columns (NAME, AGE).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from simulator.kube.resources import ResourceType

NONE = "<none>"
ROLE_LABEL = "node-role.kubernetes.io/"

Column = tuple[str, str, str, int]  # name, type, description, priority (1: -o wide)


def wanted(accept: str) -> bool:
    """Whether an Accept header asks for a Table (of meta.k8s.io v1 or v1beta1) first."""
    for media in accept.split(","):
        params = {
            key.strip().lower(): value.strip()
            for key, _, value in (part.partition("=") for part in media.split(";")[1:])
        }
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return params.get("v") in ("v1", "v1beta1")
    return False


def served(rt: ResourceType) -> bool:
    return rt.group == "" and rt.plural in PRINTERS


def table(rt: ResourceType, answer: dict[str, Any], include_object: str) -> dict[str, Any]:
    """A list answer (or one object) as a Table with one row per object."""
    columns, cells = PRINTERS[rt.plural]
    one = "items" not in answer
    items = [answer] if one else answer["items"]
    now = datetime.now(UTC)
    metadata = dict(answer.get("metadata", {}))
    if one:
        metadata = {"resourceVersion": answer["metadata"].get("resourceVersion", "")}
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": n,
                "type": t,
                "format": "name" if n == "Name" else "",
                "description": d,
                "priority": p,
            }
            for n, t, d, p in columns
        ],
        "rows": [
            {"cells": cells(obj, now), "object": _included(rt, obj, include_object)}
            for obj in items
        ],
    }


def watch_events(rt: ResourceType, lines: Iterator[bytes], include_object: str) -> Iterator[bytes]:
    """A watch's events with each object as a Table of one row; the columns are given in
    the first one only, as the real server does."""
    first = True
    for line in lines:
        event = json.loads(line)
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            event["object"] = table(rt, event["object"], include_object)
            if not first:
                event["object"]["columnDefinitions"] = []
            first = False
        yield json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _included(rt: ResourceType, obj: dict[str, Any], include_object: str) -> dict[str, Any]:
    if include_object == "Object":
        return obj
    if include_object == "None":
        return {}
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def age(created: str, now: datetime) -> str:
    """`metav1.Time` to the age kubectl shows (apimachinery's duration.HumanDuration)."""
    if not created:
        return NONE
    then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    seconds = int((now - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


# Nodes


def _node_status(node: dict[str, Any]) -> str:
    conditions = {
        c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions", [])
    }
    ready = conditions.get("Ready")
    status = ["Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"]
    if node.get("spec", {}).get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def _node_roles(node: dict[str, Any]) -> str:
    labels = node.get("metadata", {}).get("labels") or {}
    roles = {key[len(ROLE_LABEL) :] for key in labels if key.startswith(ROLE_LABEL)}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(r for r in roles if r)) or NONE


def _node_address(node: dict[str, Any], kind: str) -> str:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == kind:
            return str(address.get("address", NONE))
    return NONE


def _node_cells(node: dict[str, Any], now: datetime) -> list[Any]:
    info = node.get("status", {}).get("nodeInfo", {})
    return [
        node["metadata"]["name"],
        _node_status(node),
        _node_roles(node),
        age(node["metadata"].get("creationTimestamp", ""), now),
        info.get("kubeletVersion", ""),
        _node_address(node, "InternalIP"),
        _node_address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


NODE_COLUMNS: list[Column] = [
    ("Name", "string", "Name must be unique within a namespace.", 0),
    ("Status", "string", "The status of the node", 0),
    ("Roles", "string", "The roles of the node", 0),
    ("Age", "string", "CreationTimestamp is a timestamp of when the object was created.", 0),
    ("Version", "string", "Kubelet Version reported by the node.", 0),
    ("Internal-IP", "string", "List of addresses reachable to the node.", 1),
    ("External-IP", "string", "List of addresses reachable to the node.", 1),
    ("OS-Image", "string", "OS Image reported by the node from /etc/os-release.", 1),
    ("Kernel-Version", "string", "Kernel Version reported by the node.", 1),
    ("Container-Runtime", "string", "Container runtime version reported by the node.", 1),
]


# Pods


def _pod_status(pod: dict[str, Any]) -> str:
    status = pod.get("status", {})
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in status.get("containerStatuses") or []:
        state = container.get("state", {})
        if (waiting := state.get("waiting")) and waiting.get("reason"):
            reason = waiting["reason"]
        elif (ended := state.get("terminated")) and ended.get("reason"):
            reason = ended["reason"]
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def _pod_cells(pod: dict[str, Any], now: datetime) -> list[Any]:
    spec, status = pod.get("spec", {}), pod.get("status", {})
    containers = status.get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready"))
    gates = spec.get("readinessGates") or []
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
    gates_ready = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_status(pod),
        str(sum(int(c.get("restartCount", 0)) for c in containers)),
        age(pod["metadata"].get("creationTimestamp", ""), now),
        status.get("podIP") or NONE,
        spec.get("nodeName") or NONE,
        status.get("nominatedNodeName") or NONE,
        f"{gates_ready}/{len(gates)}" if gates else NONE,
    ]


POD_COLUMNS: list[Column] = [
    ("Name", "string", "Name must be unique within a namespace.", 0),
    ("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
    ("Status", "string", "The aggregate status of the containers in this pod.", 0),
    ("Restarts", "string", "The number of times the containers in this pod have been "
     "restarted and when the last container in this pod has restarted.", 0),
    ("Age", "string", "CreationTimestamp is a timestamp of when the object was created.", 0),
    ("IP", "string", "IP address allocated to the pod.", 1),
    ("Node", "string", "Name of the node this pod is running on.", 1),
    ("Nominated Node", "string", "Name of the node this pod is nominated to run on.", 1),
    ("Readiness Gates", "string", "The readiness gates of this pod and their state.", 1),
]  # fmt: skip


PRINTERS: dict[str, tuple[list[Column], Callable[[dict[str, Any], datetime], list[Any]]]] = {
    "nodes": (NODE_COLUMNS, _node_cells),
    "pods": (POD_COLUMNS, _pod_cells),
}
