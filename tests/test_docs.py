"""The docs a newcomer reads hold together: every setting the code reads is in
docs/configuration.md, every measured figure in docs/performance.md comes with the command
that made it, and every "docs/<file>.md: <section>" named in the docs, the deploy manifests
or the code names a file and a section that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIGURATION = ROOT / "docs" / "configuration.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
# A variable settings.py reads: env.<type>("NAME", ...) or os.environ.get("NAME").
READ = re.compile(r'(?:env\.\w+|os\.environ\.get)\(\s*"([A-Z][A-Z0-9_]+)"')
# A section named by another page: docs/<path>.md, then ": " or ", ", then its title.
REFERENCE = re.compile(r"(docs/[a-z0-9/_-]+\.md)(?:: |, )(`?[A-Z`][^.;()|]*)")
# What makes a figure: a number with its unit.
FIGURE = re.compile(r"\b\d[\d,.]*\s?(?:ms|s|MiB|MB)\b")
COMMAND = re.compile(r"bin/bench|tests/bench/|tests\.bench\.|tests/e2e/|bench_\w+\.py")


def documented() -> set[str]:
    """The variables of docs/configuration.md's tables (first column)."""
    names: set[str] = set()
    for line in CONFIGURATION.read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    return names


def test_every_setting_read_is_in_the_configuration_page() -> None:
    read = set(READ.findall((ROOT / "capvco_web" / "settings.py").read_text()))
    assert {"DEBUG", "DATABASE_URL", "CAPVCO_VAR_DIR"} <= read  # the pattern finds them
    assert read - documented() == set()


def test_every_key_of_the_deployments_configmap_is_in_the_configuration_page() -> None:
    configmap = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "configmap.yaml").read_text())
    assert set(configmap["data"]) - documented() == set()


def test_each_variable_is_documented_once() -> None:
    rows = [
        name
        for line in CONFIGURATION.read_text().splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1])
    ]
    assert sorted(rows) == sorted(set(rows))


def sections(text: str) -> list[tuple[str, str]]:
    """(title, body) of each `## ` section."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_every_measured_figure_comes_with_its_command() -> None:
    found = sections(PERFORMANCE.read_text())
    assert len(found) >= 8
    for title, body in found:
        for paragraph in body.split("\n\n"):
            if FIGURE.search(paragraph) and not paragraph.lstrip().startswith("|"):
                assert COMMAND.search(paragraph) or COMMAND.search(body), (title, paragraph)


def test_the_architecture_page_is_a_map_without_figures() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert "../" not in text  # nothing outside the repository
    assert not re.search(r"\bp95\b|\bp50\b|load \d", text)
    assert "docs/performance.md" in text


def titles(path: Path) -> list[str]:
    return [
        line.lstrip("#").strip()
        for line in path.read_text().splitlines()
        if re.match(r"#{1,4} ", line)
    ]


def referring_files() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("deploy", "templates", "bin", "capvco_web", "cloud", "gpus", "clusters"):
        found += sorted(p for p in (ROOT / folder).rglob("*") if p.is_file())
    for folder in ("sriov", "billing", "dashboard", "notify"):
        found += sorted((ROOT / folder).rglob("*.py"))
    return [p for p in found if p.suffix in {"", ".md", ".py", ".html", ".yaml", ".yml", ".sh"}]


@pytest.mark.parametrize("path", referring_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_section_named_exists(path: Path) -> None:
    text = path.read_text(errors="replace")
    assert "README: " not in text and "README.md, " not in text  # the README has no sections
    for target, named in REFERENCE.findall(text):
        page = ROOT / target
        assert page.exists(), (target, named)
        named = " ".join(named.split())
        found = [t for t in titles(page) if named.startswith(t) or t.startswith(named)]
        assert found, (target, named)


# --- the guides' pictures -----------------------------------------------------------------

PICTURES = ROOT / "docs" / "guides" / "pictures"
SHOWN = re.compile(r"!\[[^\]]+\]\(pictures/([a-z0-9-]+)\.png\)")
TAKEN = re.compile(r'\bpicture\(\s*"([a-z0-9-]+)"')


def test_every_picture_a_guide_shows_is_there_and_taken_by_a_browser_test() -> None:
    shown = {
        m
        for guide in (ROOT / "docs" / "guides").glob("*.md")
        for m in SHOWN.findall(guide.read_text())
    }
    taken = {
        name
        for test in (ROOT / "tests" / "e2e").glob("test_*.py")
        for name in TAKEN.findall(test.read_text())
    }
    kept = {path.stem for path in PICTURES.glob("*.png")}
    assert shown, "the guides show pictures (the pattern finds them)"
    # Each is made again by bin/pictures (its test takes it), and none is left unshown.
    assert shown - taken == set(), "shown, but no test takes it"
    assert shown == kept, "shown but missing, or kept but never shown"
