"""The client's operation table against the API description, statically (no server).

Every call the client can make is one entry of `operations.ALL_OPERATIONS`, and the client's
request function refuses parameters the entry does not declare. So if every entry matches
`whitesky-api.json` (operationId, method, path template, parameter names and places), the
client sends nothing the description does not have.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from capvco_web.integrations.whitesky import operations
from capvco_web.integrations.whitesky.client import WhiteskyClient
from capvco_web.integrations.whitesky.operations import ALL_OPERATIONS, Operation
from tests.integrations.whitesky.conftest import allowing

ROOT = Path(__file__).resolve().parents[3]
SPEC_CANDIDATES = [
    Path(os.environ.get("WHITESKY_API_SPEC", ROOT / "docs" / "whitesky-api.json")),
    ROOT.parent / "shared" / "whitesky" / "whitesky-api.json",
]


@cache
def spec() -> dict[str, Any]:
    for candidate in SPEC_CANDIDATES:
        if candidate.is_file():
            return json.loads(candidate.read_text())  # type: ignore[no-any-return]
    if os.environ.get("CI"):
        pytest.fail(f"whitesky-api.json not found in {SPEC_CANDIDATES}")
    pytest.skip("whitesky-api.json not found (set WHITESKY_API_SPEC)")


@cache
def spec_operations() -> dict[str, tuple[str, str, list[dict[str, Any]]]]:
    """operationId -> (METHOD, path, parameters incl. the path item's own)."""
    found: dict[str, tuple[str, str, list[dict[str, Any]]]] = {}
    for path, item in spec()["paths"].items():
        shared = item.get("parameters", [])
        for method, operation in item.items():
            if method == "parameters":
                continue
            found[operation["operationId"]] = (
                method.upper(),
                path,
                [*shared, *operation.get("parameters", [])],
            )
    return found


def described(op: Operation) -> tuple[str, str, list[dict[str, Any]]]:
    try:
        return spec_operations()[op.operation_id]
    except KeyError:
        pytest.fail(f"{op.operation_id} is not an operation of whitesky-api.json")


def params_in(op: Operation, place: str) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in described(op)[2] if p["in"] == place}


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema with `$ref` and single-entry `allOf` followed."""
    while True:
        if "$ref" in schema:
            schema = spec()["definitions"][schema["$ref"].rsplit("/", 1)[1]]
        elif "allOf" in schema and len(schema["allOf"]) == 1:
            schema = schema["allOf"][0]
        else:
            return schema


def body_schema(op: Operation) -> dict[str, Any] | None:
    bodies = list(params_in(op, "body").values())
    return resolve(bodies[0]["schema"]) if bodies else None


def by_id(op: Operation) -> str:
    return op.operation_id


each_operation = pytest.mark.parametrize("op", ALL_OPERATIONS, ids=by_id)


def test_operation_ids_are_unique() -> None:
    ids = [op.operation_id for op in ALL_OPERATIONS]
    assert len(ids) == len(set(ids))


@each_operation
def test_operation_has_the_described_method_and_path(op: Operation) -> None:
    method, path, _ = described(op)
    assert (op.method, op.path) == (method, path)


@each_operation
def test_path_parameters_are_the_described_ones(op: Operation) -> None:
    assert op.path_params == set(params_in(op, "path"))


@each_operation
def test_query_parameters_exist_as_query_parameters(op: Operation) -> None:
    described_query = params_in(op, "query")
    assert op.query <= set(described_query), sorted(op.query - set(described_query))


@each_operation
def test_required_query_parameters_are_declared(op: Operation) -> None:
    required = {name for name, p in params_in(op, "query").items() if p.get("required")}
    assert required <= op.query


@each_operation
def test_body_is_sent_only_where_a_body_is_described(op: Operation) -> None:
    bodies = params_in(op, "body")
    if op.body:
        assert bodies, f"{op.operation_id} takes no JSON body"
    if any(p.get("required") for p in bodies.values()):
        assert op.body, f"{op.operation_id} requires a JSON body"


@each_operation
def test_body_fields_exist_in_the_described_body(op: Operation) -> None:
    schema = body_schema(op)
    for field in op.body:
        assert schema is not None
        node = schema
        for part in field.split("."):
            properties = resolve(node).get("properties", {})
            assert part in properties, f"{op.operation_id}: body has no {field}"
            node = properties[part]


@each_operation
def test_required_body_fields_are_declared(op: Operation) -> None:
    schema = body_schema(op)
    if schema is None or not op.body:
        return
    prefixes = {""} | {field.rsplit(".", 1)[0] + "." for field in op.body if "." in field}
    for prefix in prefixes:
        node = schema
        for part in [p for p in prefix.split(".") if p]:
            node = resolve(node)["properties"][part]
        for name in resolve(node).get("required", []):
            assert prefix + name in op.body or any(
                f.startswith(prefix + name + ".") for f in op.body
            ), f"{op.operation_id}: required body field {prefix}{name} not declared"


@each_operation
def test_operation_is_used_by_the_client(op: Operation) -> None:
    constant = next(name for name, value in vars(operations).items() if value is op)
    source = Path(operations.__file__).with_name("client.py").read_text()
    assert f"ops.{constant}" in source, f"{constant} is declared but the client never sends it"


def test_writes_that_create_something_are_never_repeated() -> None:
    not_repeatable = {op.operation_id for op in ALL_OPERATIONS if not op.repeatable}
    assert {
        "reserveVGPU",
        "reserveAndAttachVGPUToVM",
        "createVirtualMachine",
        "createCloudspace",
        "attachExternalNetworksVirtualMachine",
    } <= not_repeatable


def test_request_function_refuses_an_undeclared_query_parameter() -> None:
    client = WhiteskyClient(
        api_url="http://127.0.0.1:9/api/1",
        customer_id="c",
        token="t",
        allowed_hosts=allowing("http://127.0.0.1:9"),
    )
    with pytest.raises(ValueError, match="not declared"):
        client._call(operations.LIST_VMS, path={"cloudspace_id": "cs"}, query={"bogus": True})


def test_request_function_refuses_an_undeclared_body_field() -> None:
    client = WhiteskyClient(
        api_url="http://127.0.0.1:9/api/1",
        customer_id="c",
        token="t",
        allowed_hosts=allowing("http://127.0.0.1:9"),
    )
    with pytest.raises(ValueError, match=r"firewall\.custom"):
        client._call(
            operations.CREATE_CLOUDSPACE,
            body={"name": "x", "location": "l", "firewall": {"private": False, "custom": {}}},
        )
