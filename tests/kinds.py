"""The suite by speed (pytest plugin, loaded by tests/conftest.py): every test gets exactly
one kind marker, from what it uses, so that `pytest -m unit` (seconds) or
`-m "not e2e and not browser"` runs a fast part. A kind marker written on a test (or its
module) is kept as the test's kind; otherwise the first kind below whose rule holds.

Imports nothing of the project: tests/test_kinds.py loads it alone in a pytest of its own.
"""

from __future__ import annotations

import pytest

KINDS = {
    "browser": "drives Chromium through Playwright (the `page` fixture)",
    "e2e": "starts the project's real processes: a Celery worker, make run (tests/e2e/)",
    "contract": "holds a running part to a contract with generated cases or a real "
    "third-party runtime (modules named *contract*; their static checks are unit)",
    "integration": "uses the test database, a live server or a simulator over real HTTP",
    "unit": "none of the above: this process alone",
}
BROWSER_FIXTURES = frozenset({"page", "context", "browser", "new_context"})
INTEGRATION_FIXTURES = frozenset(
    {"db", "transactional_db", "live_server", "whitesky_sim", "kube_sim"}
)
# Under xdist (bin/test: --dist loadgroup) one worker runs these one after another: a Celery
# worker's or a browser's timing holds on a loaded machine only when they do not overlap.
GROUPED = frozenset({"e2e", "browser"})
GROUP = "processes"


def kind_of(item: pytest.Item) -> str:
    """The kind of a test that names none: from its fixtures (the whole closure), its
    place under the rootdir and its markers."""
    fixtures = set(getattr(item, "fixturenames", ()))
    try:
        where = item.path.relative_to(item.config.rootpath).parts
    except ValueError:  # a test outside the rootdir: its place says nothing
        where = ()
    if fixtures & BROWSER_FIXTURES:
        return "browser"
    if "e2e" in where[:-1]:
        return "e2e"
    # pytest-django's marker reaches the database through a fixture it asks for at setup,
    # outside the closure.
    running = bool(fixtures & INTEGRATION_FIXTURES or item.get_closest_marker("django_db"))
    if running and "contract" in item.path.stem:
        return "contract"
    return "integration" if running else "unit"


def pytest_configure(config: pytest.Config) -> None:
    for name, description in KINDS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


def pytest_itemcollected(item: pytest.Item) -> None:
    # Before `-m` deselects (pytest_collection_modifyitems), in xdist's workers too.
    kinds = {name for name in KINDS if item.get_closest_marker(name)}
    if not kinds:
        kind = kind_of(item)
        item.add_marker(kind)
        kinds = {kind}
    if kinds & GROUPED and item.config.getoption("dist", "no") != "no":
        item.add_marker(pytest.mark.xdist_group(GROUP))
