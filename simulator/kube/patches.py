"""The three patch formats of the API server, applied to a copy of the object.

* JSON merge patch (RFC 7386, `application/merge-patch+json`): maps merge, `null`
  deletes, anything else (lists too) replaces.
* Strategic merge patch (`application/strategic-merge-patch+json`, built-in kinds only):
  a merge patch whose lists of objects merge by their key where the Kubernetes types
  declare one (containers by name, conditions by type, ...; `MERGE_KEYS`, by field name),
  whose `finalizers` are a set, and which honours `$patch: delete|replace` and
  `$deleteFromPrimitiveList/<field>`. `$setElementOrder` and `$retainKeys` are accepted
  and ignored.
* JSON patch (RFC 6902, `application/json-patch+json`): add, remove, replace, move, copy,
  test. A failing operation answers 422 as the server does.
"""

from __future__ import annotations

import copy
from typing import Any

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)  # what is simulated: not APPLY_PATCH

# Lists of objects merged by a key in strategic merge patches (patchMergeKey in the types).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "addresses": "type",
    "taints": "key",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "resourceClaims": "name",
}
# Lists of scalars merged as sets.
MERGED_PRIMITIVE_LISTS = {"finalizers"}


class PatchError(Exception):
    """The patch cannot be applied (422), or is not a patch at all (`malformed`: 400)."""

    def __init__(self, message: str, *, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            doomed = set(value or [])
            result[field] = [item for item in result.get(field) or [] if item not in doomed]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS:
            result[key] = _merge_list_by_key(result.get(key) or [], value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in MERGED_PRIMITIVE_LISTS:
            current = list(result.get(key) or [])
            result[key] = current + [item for item in value if item not in current]
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_list_by_key(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    merged = list(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        index = next((i for i, old in enumerate(merged) if _key_of(old, key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif item.get("$patch") == "replace" or index is None:
            clean = {k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"}
            if index is None:
                merged.append(clean)
            else:
                merged[index] = clean
        else:
            merged[index] = strategic_merge_patch(merged[index], item)
    return merged


def _key_of(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None


# --- JSON patch -------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'JSON pointer "{path}" does not start with "/"')
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        node = _child(node, part, path)
    return node


def _child(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict):
        if part not in node:
            raise PatchError(f"doc is missing path: {path}: missing value")
        return node[part]
    if isinstance(node, list):
        return node[_index(node, part, path, allow_end=False)]
    raise PatchError(f"doc is missing path: {path}: missing value")


def _index(node: list[Any], part: str, path: str, *, allow_end: bool) -> int:
    if allow_end and part == "-":
        return len(node)
    if not part.isdigit() or (len(part) > 1 and part.startswith("0")):
        raise PatchError(f"invalid array index {part!r} in {path}")
    index = int(part)
    if index > len(node) or (index == len(node) and not allow_end):
        raise PatchError(f"unable to access invalid index: {index} in {path}")
    return index


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        node = _child(node, part, path)
    return node


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, parts, path)
    if isinstance(parent, dict):
        if parts[-1] not in parent:
            raise PatchError(f"Unable to remove nonexistent key: {parts[-1]}: missing value")
        return parent.pop(parts[-1])
    if isinstance(parent, list):
        return parent.pop(_index(parent, parts[-1], path, allow_end=False))
    raise PatchError(f"doc is missing path: {path}: missing value")


def _add(doc: Any, path: str, value: Any, *, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    if isinstance(parent, dict):
        if replace and parts[-1] not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}")
        parent[parts[-1]] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, parts[-1], path, allow_end=False)] = value
        else:
            parent.insert(_index(parent, parts[-1], path, allow_end=True), value)
    else:
        raise PatchError(f"doc is missing path: {path}: missing value")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations", malformed=True)
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"invalid JSON patch operation: {operation}", malformed=True)
        op, path = operation["op"], operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f'missing value for "{op}" operation', malformed=True)
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            _remove(doc, path)
        elif op == "replace":
            doc = _add(doc, path, copy.deepcopy(operation["value"]), replace=True)
        elif op in ("move", "copy"):
            source = operation.get("from")
            if source is None:
                raise PatchError(f'missing "from" for "{op}" operation', malformed=True)
            value = _remove(doc, source) if op == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value)
        elif op == "test":
            if _get(doc, path) != operation["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {op}", malformed=True)
    return doc
