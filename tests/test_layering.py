"""Imports between the apps go one way: `clusters` (the orchestration) calls `gpus`; the
domain modules of `gpus` never import `clusters`. Entry points (the API, the admin, tasks,
management commands) sit above both apps and may call either app's services. Type-only
imports (under `if TYPE_CHECKING:`) are not imports at run time and are allowed: a foreign
key by label already names the other app's model."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINTS = {"admin.py", "api", "tasks.py", "management", "views.py", "migrations"}


def _runtime_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(child) for child in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _domain_modules(app: str) -> list[Path]:
    return [
        path
        for path in sorted((ROOT / app).rglob("*.py"))
        if path.relative_to(ROOT / app).parts[0] not in ENTRY_POINTS
    ]


def test_gpus_domain_modules_import_nothing_from_clusters() -> None:
    modules = _domain_modules("gpus")
    assert {p.name for p in modules} >= {"models.py", "services.py", "mirror.py", "naming.py"}
    offending = {
        str(path.relative_to(ROOT)): sorted(
            m for m in _runtime_imports(path) if m == "clusters" or m.startswith("clusters.")
        )
        for path in modules
    }
    assert {path: names for path, names in offending.items() if names} == {}


def test_the_check_sees_an_import_from_clusters(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from clusters.models import Machine\n"
        "if TYPE_CHECKING:\n    from clusters.models import Location\n"
    )
    assert _runtime_imports(module) == {"typing", "clusters.models"}
