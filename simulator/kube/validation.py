"""What the real API server refuses in what is written (422 Invalid), for the rules the
project's writes can break: names (RFC 1123 subdomain, a namespace's an RFC 1123 label, a
CRD's `<plural>.<group>`), a DaemonSet or Deployment without a selector or whose
selector does not match its template's labels, a pod (or template) without containers or
a container without a name or image, and a changed selector (immutable on update).

The answer has the real server's shape: `Kind.group "name" is invalid: <field>: <problem>`
(several in brackets), reason `Invalid`, and `details.causes` with each field's reason
(`FieldValueInvalid`, `FieldValueRequired`) and message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from simulator.kube.errors import StatusError
from simulator.kube.resources import (
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    PODS,
    ResourceType,
)

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. "
    f"'example.com', regex used for validation is '{_SUBDOMAIN}')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
    "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
    f"'123-abc', regex used for validation is '{_LABEL}')"
)

Cause = tuple[str, str, str]  # (reason, field, message)


def _go(value: Any) -> str:
    """A value as the real server's messages print it (Go's %#v, near enough)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        pairs = ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in sorted(value.items()))
        return f"map[string]string{{{pairs}}}"
    return json.dumps(value, sort_keys=True)


def invalid_value(field: str, value: Any, problem: str) -> Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {_go(value)}: {problem}")


def required(field: str) -> Cause:
    return ("FieldValueRequired", field, "Required value")


def refusal(rt: ResourceType, name: str, causes: list[Cause]) -> StatusError:
    problems = [f"{field}: {message}" for _, field, message in causes]
    listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    details: dict[str, Any] = {"name": name, "kind": rt.kind}
    if rt.group:
        details["group"] = rt.group
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for reason, field, message in causes
    ]
    return StatusError(
        422, f'{qualified} "{name}" is invalid: {listed}', reason="Invalid", details=details
    )


def name_causes(rt: ResourceType, name: str) -> list[Cause]:
    if rt == CRDS:
        return []  # checked against its spec in crd_causes
    if not rt.builtin:
        bad = name in (".", "..") or "/" in name or "%" in name
        return [invalid_value("metadata.name", name, "may not contain '/' or '%'")] if bad else []
    if rt == NAMESPACES:
        if len(name) > 63:
            return [invalid_value("metadata.name", name, "must be no more than 63 characters")]
        if not re.fullmatch(_LABEL, name):
            return [invalid_value("metadata.name", name, LABEL_MESSAGE)]
        return []
    if len(name) > 253:
        return [invalid_value("metadata.name", name, "must be no more than 253 characters")]
    if not re.fullmatch(_SUBDOMAIN, name):
        return [invalid_value("metadata.name", name, SUBDOMAIN_MESSAGE)]
    return []


def _pod_spec_causes(spec: Any, at: str) -> list[Cause]:
    if not isinstance(spec, dict):
        return [required(at)]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [required(f"{at}.containers")]
    causes: list[Cause] = []
    for index, container in enumerate(containers):
        where = f"{at}.containers[{index}]"
        if not isinstance(container, dict):
            causes.append(required(where))
            continue
        name = container.get("name")
        if not name:
            causes.append(required(f"{where}.name"))
        elif not re.fullmatch(_LABEL, str(name)) or len(str(name)) > 63:
            causes.append(invalid_value(f"{where}.name", name, LABEL_MESSAGE))
        if not container.get("image"):
            causes.append(required(f"{where}.image"))
    return causes


def _selected(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator = requirement.get("key"), requirement.get("operator")
        values = requirement.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _workload_causes(
    rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None
) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes: list[Cause] = []
    selector = spec.get("selector")
    found = spec.get("template")
    template: dict[str, Any] = found if isinstance(found, dict) else {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        causes.append(
            required("spec.selector")
            if not isinstance(selector, dict)
            else invalid_value(
                "spec.selector", selector, f"empty selector is invalid for {rt.kind.lower()}"
            )
        )
    elif not _selected(selector, labels):
        causes.append(
            invalid_value(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        )
    if old is not None:
        before = (old.get("spec") or {}).get("selector")
        if before != selector:
            causes.append(invalid_value("spec.selector", selector, "field is immutable"))
    causes += _pod_spec_causes(template.get("spec"), "spec.template.spec")
    return causes


def crd_causes(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    wanted = f"{names.get('plural', '')}.{spec.get('group', '')}"
    name = obj["metadata"].get("name", "")
    if name != wanted:
        return [invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group')]
    return []


def validate(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """Raise 422 Invalid for what the real server refuses in `obj` (`old`: an update)."""
    name = str(obj["metadata"].get("name", ""))
    causes = name_causes(rt, name) if old is None else []
    if rt == PODS:
        causes += _pod_spec_causes(obj.get("spec"), "spec")
    elif rt in (DAEMONSETS, DEPLOYMENTS):
        causes += _workload_causes(rt, obj, old)
    elif rt == CRDS:
        causes += crd_causes(obj)
    if causes:
        raise refusal(rt, name, causes)
