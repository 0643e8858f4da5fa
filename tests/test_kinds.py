"""Every test gets one kind marker from what it uses (tests/kinds.py): a pytest of its own
collects a sample of each kind, selected with `-m` as `bin/test -m unit` selects."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kinds import KINDS

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = {
    "conftest.py": """
import pytest

@pytest.fixture
def db(): ...

@pytest.fixture
def page(): ...

@pytest.fixture
def world(db): ...
""",
    "test_plain.py": "def test_sum():\n    assert 1 + 1 == 2\n",
    "test_rows.py": """
import pytest

def test_a_row(db): ...

def test_a_world_of_rows(world): ...

@pytest.mark.django_db
def test_marked_for_the_database(): ...
""",
    "test_api_contract.py": "def test_every_operation(db): ...\n",
    "test_table_contract.py": "def test_the_table_matches_the_description(): ...\n",
    "e2e/test_worker.py": "def test_a_worker(db): ...\n",
    "e2e/test_pages.py": "def test_a_page(page, db): ...\n",
    "test_written.py": """
import pytest

pytestmark = pytest.mark.contract

def test_the_module_says_contract(db): ...
""",
    "test_said.py": """
import pytest

@pytest.mark.e2e
def test_the_test_says_e2e(): ...
""",
}

EXPECTED = {
    "unit": [
        "test_plain.py::test_sum",
        "test_table_contract.py::test_the_table_matches_the_description",
    ],
    "integration": [
        "test_rows.py::test_a_row",
        "test_rows.py::test_a_world_of_rows",
        "test_rows.py::test_marked_for_the_database",
    ],
    "contract": [
        "test_api_contract.py::test_every_operation",
        "test_written.py::test_the_module_says_contract",
    ],
    "e2e": ["e2e/test_worker.py::test_a_worker", "test_said.py::test_the_test_says_e2e"],
    "browser": ["e2e/test_pages.py::test_a_page"],
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_collection_hook_gives_each_test_its_kind(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    for name, text in SAMPLE.items():
        (pytester.path / name).parent.mkdir(exist_ok=True)
        (pytester.path / name).write_text(text)
    pytester.makeini("[pytest]\nmarkers =\n    django_db: the database\n")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    result = pytester.runpytest_subprocess(
        "--disable-plugin-autoload", "-p", "tests.kinds", "-p", "no:cacheprovider",
        "--strict-markers", "--collect-only", "-q", "-m", kind,
    )  # fmt: skip

    assert result.ret == 0, result.stdout.str()
    assert sorted(line for line in result.outlines if "::" in line) == EXPECTED[kind]
