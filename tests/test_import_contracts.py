"""The walls between the apps hold: import-linter's contracts (pyproject.toml
[tool.importlinter]) are kept, so that `pytest` alone catches an import across a wall as
bin/test's `lint-imports` does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from django.conf import settings

from tests.checkout import APPS

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, check=False
    )


def test_the_import_contracts_are_kept() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_the_contracts_catch_a_service_that_imports_its_tasks(tmp_path: Path) -> None:
    # A copy of the tree whose cluster services import the tasks module again (the circle
    # services -> tasks -> reconcile -> services), and whose capvco_web reads an app.
    copy = tmp_path / "tree"
    shutil.copytree(
        ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "node_modules", "__pycache__")
    )
    services = copy / "clusters" / "services.py"
    services.write_text(services.read_text() + "\n\ndef f() -> None:\n    import clusters.tasks\n")
    metrics = copy / "capvco_web" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\nimport gpus.models\n")
    # notify and dashboard are siblings: the alerts read no page's code.
    alerts = copy / "notify" / "alerts.py"
    alerts.write_text(alerts.read_text() + "\nimport dashboard.selectors\n")
    result = _lint(copy)
    assert result.returncode != 0
    assert "No cycles are allowed in clusters" in result.stdout
    assert ".services -> .tasks" in result.stdout
    assert "capvco_web is not allowed to import gpus" in result.stdout
    assert "notify is not allowed to import dashboard" in result.stdout


def test_every_app_is_walled_copied_and_compiled() -> None:
    """An app added to INSTALLED_APPS is in the contracts' root packages, in a second
    checkout's code (tests/checkout.py) and in the image's compiled code."""
    ours = {app for app in settings.INSTALLED_APPS if (ROOT / app).is_dir()}
    packages = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
            "root_packages"
        ]
    )
    compiled = next(
        line
        for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
        if "compileall" in line
    ).split()
    assert ours == set(APPS)
    assert ours <= packages
    assert ours <= set(compiled)
