"""A second checkout of this one, as another shell or another operator's `make run` has it:
the listed parts of its code, its virtualenv linked, no var/ yet."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The code a checkout runs: capvco_web and every app.
APPS = (
    "capvco_web",
    "cloud",
    "gpus",
    "clusters",
    "kube",
    "sriov",
    "billing",
    "autoscale",
    "dashboard",
    "notify",
)


def checkout_copy(where: Path, parts: Iterable[str]) -> Path:
    """`parts` (files and directories of this checkout) copied to `where`, the virtualenv
    linked as its .venv."""
    where.mkdir(parents=True)
    for part in parts:
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, where / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / part, where / part)
    (where / ".venv").symlink_to(sys.prefix)
    return where
