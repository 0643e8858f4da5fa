"""OpenAPI v2 (`/openapi/v2`) and v3 (`/openapi/v3`, `/openapi/v3/<group-version>`) of the
built-in kinds served, as kubectl reads them for `apply` (the patch strategies of each
field), its client-side validation and `explain`.

The schemas are the published Kubernetes ones that `kubernetes-validate` ships (JSON
Schema, converted from the real server's OpenAPI): turned back into OpenAPI, `$ref`s to
`#/definitions/` (v2) or `#/components/schemas/` (v3), nullable types to plain ones,
int-or-string and quantities as the real server describes them. Only the definitions the
served kinds reach are published.

The v3 documents' `paths` carry each kind's PATCH operation with its query parameters:
kubectl reads `fieldValidation` there, and then leaves validation to the server
(`unknown_fields`) rather than validating on its own against OpenAPI v2, which it only
reads as protobuf (not served: `/openapi/v2` is JSON only, as a server without the
protobuf encoding answers). Custom kinds (CRDs) are not published: kubectl applies them
with a JSON merge patch.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from importlib import resources as package_files
from typing import Any

from simulator.kube.resources import BUILTIN, ResourceType

SCHEMA_VERSION = "v1.33.0-local"  # the Kubernetes release the simulator says it is
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
# What every group-version's document carries besides its kinds.
_COMMON = (f"{_META}Status", f"{_META}DeleteOptions", f"{_META}WatchEvent", f"{_META}Patch")
# As the real server describes them (the JSON Schema says oneOf string/integer or number).
_SCALARS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "description": "IntOrString is a type that can hold an int32 or a string.",
        "type": "string",
        "format": "int-or-string",
    },
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "description": "Quantity is a fixed-point representation of a number.",
        "type": "string",
    },
}


@functools.cache
def _definitions() -> dict[str, Any]:
    path = package_files.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", SCHEMA_VERSION, "_definitions.json"
    )
    found: dict[str, Any] = json.loads(path.read_text())["$defs"]
    return found


def _definition_name(rt: ResourceType) -> str | None:
    """The definition of a built-in kind, found by its group-version-kind."""
    for name, schema in _definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if (gvk["group"], gvk["version"], gvk["kind"]) == (rt.group, rt.version, rt.kind):
                return name
    return None


def _reached(roots: Iterable[str]) -> list[str]:
    definitions, seen, todo = _definitions(), set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in definitions:
            continue
        seen.add(name)
        todo.extend(_refs(definitions[name]))
    return sorted(seen)


def _refs(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _convert(schema: Any, v3: bool) -> Any:
    """One JSON Schema node as OpenAPI."""
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[-1]
        ref = f"#/components/schemas/{target}" if v3 else f"#/definitions/{target}"
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        if not rest:
            return {"$ref": ref}
        # OpenAPI 3.0 ignores siblings of a $ref: the real server wraps it in allOf.
        return {"allOf": [{"$ref": ref}], **rest} if v3 else {"$ref": ref, **rest}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, list):
            out[key] = next(t for t in value if t != "null")
        elif key == "properties":
            out[key] = {name: _convert(prop, v3) for name, prop in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _convert(value, v3)
        elif key in ("enum", "oneOf", "$schema", "$id"):
            continue  # the real v2 has none; v3's are in the descriptions anyway
        else:
            out[key] = value
    return out


def _schemas(names: Iterable[str], v3: bool) -> dict[str, Any]:
    definitions = _definitions()
    return {
        name: _SCALARS[name] if name in _SCALARS else _convert(definitions[name], v3)
        for name in names
    }


def _roots(kinds: Iterable[ResourceType]) -> list[str]:
    roots = list(_COMMON)
    for rt in kinds:
        name = _definition_name(rt)
        if name is not None:
            roots += [name, f"{name}List"]
    return roots


_PATCH_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _paths(kinds: Iterable[ResourceType]) -> dict[str, Any]:
    """Each kind's item path with its PATCH operation, as kubectl looks them up."""
    paths: dict[str, Any] = {}
    for rt in kinds:
        root = f"/apis/{rt.group}/{rt.version}" if rt.group else "/api/v1"
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        parameters = [
            {"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
            for name in _PATCH_PARAMETERS
        ]
        paths[f"{root}{scope}/{rt.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{'Namespaced' if rt.namespaced else ''}{rt.kind}",
                "parameters": parameters,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {
                    "group": rt.group, "version": rt.version, "kind": rt.kind,
                },
            }
        }  # fmt: skip
    return paths


def unknown_fields(rt: ResourceType, obj: Any) -> list[str]:
    """The fields of `obj` its kind's schema does not declare (`spec.foo`, `containers[0].x`),
    as the server's field validation names them; none for a kind without a schema."""
    name = _definition_name(rt) if rt.builtin else None
    if name is None:
        return []
    found: list[str] = []
    _walk(_definitions()[name], obj, "", found)
    return found


def _walk(schema: dict[str, Any], value: Any, path: str, found: list[str]) -> None:
    while "$ref" in schema:
        schema = _definitions()[schema["$ref"].rsplit("/", 1)[-1]]
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            at = f"{path}.{key}" if path else key
            if key.startswith("$"):
                continue  # a strategic merge patch's directive ($patch, $setElementOrder/...)
            if properties is not None and key in properties:
                _walk(properties[key], item, at, found)
            elif isinstance(extra, dict):
                _walk(extra, item, at, found)
            elif properties is not None and extra is None:
                found.append(at)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _walk(schema["items"], item, f"{path}[{index}]", found)


def _info(version: str) -> dict[str, str]:
    return {"title": "Kubernetes", "version": version}


@functools.cache
def v2(version: str) -> bytes:
    document = {
        "swagger": "2.0",
        "info": _info(version),
        "paths": {},
        "definitions": _schemas(_reached(_roots(BUILTIN)), v3=False),
    }
    return json.dumps(document, separators=(",", ":")).encode()


def group_versions() -> list[str]:
    """The group-versions published in v3, as its index names them (`api/v1`, ...)."""
    found = {f"apis/{rt.group}/{rt.version}" if rt.group else "api/v1" for rt in BUILTIN}
    return sorted(found)


@functools.cache
def v3(group_version: str, version: str) -> bytes | None:
    kinds = [
        rt
        for rt in BUILTIN
        if (f"apis/{rt.group}/{rt.version}" if rt.group else "api/v1") == group_version
    ]
    if not kinds:
        return None
    document = {
        "openapi": "3.0.0",
        "info": _info(version),
        "paths": _paths(kinds),
        "components": {"schemas": _schemas(_reached(_roots(kinds)), v3=True)},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def v3_index(prefix: str, version: str) -> dict[str, Any]:
    """`/openapi/v3`: where each group-version's document is. client-go requests the
    `serverRelativeURL` as it is, so it carries the cluster's base path (`prefix`)."""
    paths = {}
    for group_version in group_versions():
        body = v3(group_version, version)
        assert body is not None
        digest = hashlib.sha512(body).hexdigest().upper()
        paths[group_version] = {
            "serverRelativeURL": f"{prefix}/openapi/v3/{group_version}?hash={digest}"
        }
    return {"paths": paths}
