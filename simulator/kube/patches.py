"""The three patch formats of the API server, applied to a copy of the object.

* JSON merge patch (RFC 7386, `application/merge-patch+json`): maps merge, `null`
  deletes, anything else (lists too) replaces.
* Strategic merge patch (`application/strategic-merge-patch+json`, built-in kinds only):
  a merge patch whose lists of objects merge by their key where the Kubernetes types
  declare one (containers by name, conditions by type, ...; `MERGE_KEYS`, by field name),
  whose `finalizers` are a set, and which honours `$patch: delete|replace` and
  `$deleteFromPrimitiveList/<field>`. `$setElementOrder` and `$retainKeys` are accepted
  and ignored.
* JSON patch (RFC 6902, `application/json-patch+json`), applied by `jsonpatch`: add,
  remove, replace, move, copy, test. A failing operation answers 422 as the server does.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer

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


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902, applied by `jsonpatch` to a copy: a patch that is not a list of operations
    is malformed (400), one whose operation cannot apply (a test that fails, a path that
    is not there) answers 422."""
    try:
        return jsonpatch.JsonPatch(operations).apply(target)
    except jsonpatch.InvalidJsonPatch as exc:
        raise PatchError(f"invalid JSON patch: {exc}", malformed=True) from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(f"the JSON patch does not apply: {exc}") from exc
