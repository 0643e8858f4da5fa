"""The docs' benchmark figures are what `bin/bench` recorded (tests/bench/figures.py): every
benchmark is in its list and still runs its imports, every figure table in docs/ is the
record's rendering, and `bin/bench --check` tells a moved count or ratio from noise."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.bench import figures
from tests.bench.figure_list import BENCHES

BENCH_FILES = sorted(p.stem for p in figures.BENCH_DIR.glob("bench_*.py"))


def test_every_benchmark_is_run_by_the_command() -> None:
    assert sorted(bench.name for bench in BENCHES) == BENCH_FILES


@pytest.mark.parametrize("name", BENCH_FILES)
def test_every_benchmark_imports(name: str) -> None:
    """A benchmark that no longer imports (a model moved) is found here, not at the next
    `bin/bench`."""
    assert callable(importlib.import_module(f"tests.bench.{name}").main)


def test_every_benchmark_is_recorded_with_each_of_its_figures() -> None:
    record = figures.record_read()
    for bench in BENCHES:
        run = record.get(bench.name)
        assert run, f"{bench.name} is not recorded: run `{bench.command}`"
        assert figures.missing(bench, run["result"]) == []


def test_every_figure_table_in_the_docs_is_the_records_rendering() -> None:
    rendered = figures.docs_rendered(figures.record_read(), BENCHES)
    shown: set[str] = set()
    for path, text in rendered.items():
        assert path.read_text() == text, (
            f"{path}: a figure table differs from the record: run `bin/bench --docs`"
        )
        shown |= set(figures.blocks(text))
    assert shown == {bench.name for bench in BENCHES}


def _bench() -> figures.Bench:
    return figures.Bench(
        "bench_x",
        figures=(
            figures.count("queries", "queries"),
            figures.ratio("deep / first", figures.at("ratio"), 0.25),
            figures.ms("p95", "p95"),
        ),
    )


def test_check_fails_on_a_count_that_moved_by_one() -> None:
    problems = figures.moved(
        _bench(), {"queries": 16, "ratio": 1.0, "p95": 80}, {"queries": 17, "ratio": 1.0, "p95": 80}
    )
    assert problems == ["bench_x: queries: 16 -> 17"]


def test_check_fails_on_a_ratio_past_its_tolerance_and_not_within_it_nor_on_times() -> None:
    recorded = {"queries": 16, "ratio": 2.0, "p95": 80}
    assert figures.moved(_bench(), recorded, {"queries": 16, "ratio": 2.4, "p95": 800}) == []
    assert figures.moved(_bench(), recorded, {"queries": 16, "ratio": 2.6, "p95": 80}) == [
        "bench_x: deep / first: 2.00x -> 2.60x (more than 25% apart)"
    ]


def test_a_benchmark_without_its_figure_or_its_json_fails_on_its_own() -> None:
    assert figures.failures(_bench(), {"result": None, "returncode": 1}) == [
        "bench_x: printed no JSON line (exit 1)"
    ]
    assert figures.failures(_bench(), {"result": {"queries": 1, "ratio": 1}, "returncode": 1}) == [
        "bench_x: exited 1",
        "bench_x: no value for 'p95'",
    ]


def test_the_last_json_line_is_the_result(tmp_path: Path) -> None:
    assert figures.last_json_line('noise\n{"a": 1}\n  PASS x\n{"b": 2}\ntrailing') == {"b": 2}
    assert figures.last_json_line("no json here") is None
