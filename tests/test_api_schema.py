"""The API's OpenAPI schema as third-party tools read it: valid for openapi-spec-validator,
a client generated from it by openapi-python-client has every operation and works, and its
patterns mean the same in ECMAScript (what JSON Schema patterns are written in) as in
Python."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from rest_framework.test import APIClient

from capvco_web.tokens import api_token_create
from capvco_web.validators import visible_text
from tests.factories import AccountFactory, UserFactory

pytestmark = pytest.mark.django_db

METHODS = {"get", "put", "post", "patch", "delete"}


@pytest.fixture
def served() -> dict[str, Any]:
    """The schema as /api/v1/schema/ serves it."""
    client = APIClient()
    client.force_authenticate(UserFactory(is_staff=True, is_superuser=True))
    response = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return dict(response.json())


def test_the_schema_is_valid_openapi(served: dict[str, Any]) -> None:
    validate(served)  # raises, naming the place, when it is not


def _operations(schema: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method, path)
        for path, item in schema["paths"].items()
        for method in item
        if method in METHODS
    }


def _snake(operation_id: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", operation_id).lower())


def test_a_generated_client_has_every_operation_and_calls_the_api(
    served: dict[str, Any], tmp_path: Path, live_server: Any
) -> None:
    document = tmp_path / "schema.json"
    document.write_text(json.dumps(served))
    (tmp_path / "config.yaml").write_text("post_hooks: []\n")  # no formatter run
    package = "capvco_generated_client"
    generator = Path(sys.executable).with_name("openapi-python-client")
    result = subprocess.run(
        [
            str(generator),
            "generate",
            f"--path={document}",
            "--meta=none",
            f"--config={tmp_path / 'config.yaml'}",
            f"--output-path={tmp_path / package}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # It says so when it skips an operation or a model it cannot read.
    assert "Warning" not in result.stdout + result.stderr, result.stdout + result.stderr

    modules = sorted((tmp_path / package / "api").glob("*/*.py"))
    modules = [m for m in modules if m.name != "__init__.py"]
    generated = set()
    for module in modules:
        source = module.read_text()
        method = re.search(r'"method": "([a-z]+)"', source)
        url = re.search(r'"url": "([^"]+)"', source)
        assert method and url, module
        generated.add((method[1], url[1]))
    assert generated == _operations(served)
    operation_ids = {
        _snake(operation["operationId"])
        for item in served["paths"].values()
        for method, operation in item.items()
        if method in METHODS
    }
    assert {m.stem for m in modules} == operation_ids

    sys.path.insert(0, str(tmp_path))
    try:
        for module in modules:
            importlib.import_module(f"{package}.api.{module.parent.name}.{module.stem}")
        client_module = importlib.import_module(package)
        accounts_list = importlib.import_module(f"{package}.api.accounts.accounts_list")
        account = AccountFactory()
        user = UserFactory(is_staff=True, is_superuser=True)
        _, token = api_token_create(user=user, name="generated client", actor=user)
        with client_module.AuthenticatedClient(base_url=live_server.url, token=token) as client:
            page = accounts_list.sync(client=client)
        assert [item.name for item in page.results] == [account.name]
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.split(".")[0] == package]:
            del sys.modules[name]


# Every code point but the surrogates (which no valid text holds).
_ALL = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def _refused() -> list[int]:
    refused = []
    for cp in _ALL:
        try:
            visible_text(chr(cp))
        except Exception:
            refused.append(cp)
    return refused


def test_the_visible_text_pattern_is_the_rule_in_python_and_in_ecmascript(
    served: dict[str, Any],
) -> None:
    patterns = {
        node.get("pattern")
        for node in _nodes(served)
        if isinstance(node, dict) and "\U000e0001" in str(node.get("pattern", ""))
    }
    assert len(patterns) == 1, "one visible-text pattern, naming U+E0001"
    pattern = patterns.pop()
    refused = _refused()
    assert 0x200B in refused and 0xE0001 in refused and 0x10FFFD in refused
    # Python (schemathesis, openapi-spec-validator) reads code points.
    compiled = re.compile(pattern)
    taken_in_python = [cp for cp in _ALL if compiled.fullmatch(f"a{chr(cp)} b")]
    assert sorted(set(_ALL) - set(taken_in_python)) == refused

    # ECMAScript reads UTF-16 code units without the `u` flag (a character past U+FFFF
    # is two), code points with it: the same characters are refused either way.
    node = shutil.which("node")
    assert node, "node (Debian's nodejs) is needed: bin/test installs it"
    script = """
        const [pattern, flags] = JSON.parse(require('fs').readFileSync(0, 'utf8'));
        const re = new RegExp(pattern, flags), refused = [];
        for (let cp = 0; cp < 0x110000; cp++) {
          if (cp >= 0xd800 && cp <= 0xdfff) continue;
          if (!re.test('a' + String.fromCodePoint(cp) + ' b')) refused.push(cp);
        }
        console.log(JSON.stringify(refused));
    """
    for flags in ("", "u"):
        result = subprocess.run(
            [node, "-e", script],
            input=json.dumps([pattern, flags]),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert json.loads(result.stdout) == refused, f"flags {flags!r}"


def _nodes(value: Any) -> list[Any]:
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        found.append(item)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
