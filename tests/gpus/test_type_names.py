"""The GPU type-name rule on every name the GPU guide's table shows: the table is the list
of cases, so the guide and the rule cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpus.type_names import is_of_type, name_words

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "gpu.md"
_ROW = re.compile(
    r"^\| `([^`]+)`(?: \(vendor (\w+)\))? \|[^|]+\|[^|]+\| `([^`]+)` \| `([^`]+)` \|$"
)


def _table() -> list[tuple[str, str, str]]:
    """(name as the resolver or a guest reads it, of type, not of type) per row."""
    section = GUIDE.read_text().split("## What is verified and how", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if found := _ROW.match(line):
            name, vendor, of, not_of = found.groups()
            rows.append((f"{vendor} {name}" if vendor else name, of, not_of))
    return rows


ROWS = _table()


def test_the_guide_shows_cards_passthrough_and_vgpu_names() -> None:
    names = [name for name, _, _ in ROWS]
    assert len(ROWS) >= 15
    assert {"NVIDIA A100 0000:17:00.0", "NVIDIA H200", "GRID A100-40C", "Tesla T4"} <= set(names)


@pytest.mark.parametrize(("name", "of", "not_of"), ROWS, ids=[row[0] for row in ROWS])
def test_each_name_in_the_guide_is_of_its_type_and_not_of_the_other(
    name: str, of: str, not_of: str
) -> None:
    assert is_of_type(name, of)
    assert not is_of_type(name, not_of)


def test_words_drop_vendors_pci_address_and_vgpu_board_variants() -> None:
    assert name_words("NVIDIA A100 0000:3b:00.0") == ("a100",)
    assert name_words("GRID A100DX-80C") == ("a100", "80c")
    assert name_words("NVIDIA H100L-94C") == ("h100", "94c")
    # Variant letters are dropped only in a vGPU type name: an L40S stays an L40S.
    assert name_words("NVIDIA L40S") == ("l40s",)
    assert name_words("Quadro RTX 6000") == ("rtx", "6000")


@pytest.mark.parametrize("empty", ["", "NVIDIA", "GRID -"])
def test_a_name_or_type_of_vendor_words_only_matches_nothing(empty: str) -> None:
    assert not is_of_type(empty, "NVIDIA A100")
    assert not is_of_type("NVIDIA A100", empty)
