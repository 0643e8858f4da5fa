"""Every benchmark at its defaults, and the figures the docs state from what they printed.

    bin/bench                      # run them all, record, and rewrite the docs' figure tables
    bin/bench --check              # run them all and fail where a figure moved
    bin/bench --only bench_plan    # some of them (comma-separated)

Each benchmark of ``tests/bench`` prints one JSON line last; the figures below are read
from it. A run records every benchmark's line in ``docs/figures.json`` and rewrites each
table between ``<!-- figures: NAME -->`` and ``<!-- /figures: NAME -->`` in ``docs/``.
``--check`` compares instead: a count (SQL queries, API calls, rows, steps) must equal the
recorded one exactly, a ratio must stay within its tolerance of the recorded one; times
are shown with their load and never compared, the machine being shared. A benchmark that
fails its own verdict fails the command either way. ``tests/test_bench_figures.py`` holds
the docs' tables to the record, so a table edited by hand fails the suite.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RECORD = DOCS / "figures.json"
BENCH_DIR = ROOT / "tests" / "bench"

# count: the same on every run (queries, calls, rows, a verdict), compared exactly;
# ratio: two figures of one run, compared within a tolerance; shown: times and whatever
# moves with the machine's load, given with that load and never compared.
Kind = Literal["count", "ratio", "shown"]
Result = Mapping[str, Any]


@dataclass(frozen=True)
class Figure:
    label: str
    read: Callable[[Result], float | int | bool | None]
    kind: Kind
    unit: str = ""
    # Figures with a column other than "value" make a table of rows (labels) by columns.
    column: str = "value"
    # A ratio may move by this fraction of itself before --check calls it moved.
    tolerance: float = 0.25


def at(*path: str | int) -> Callable[[Result], Any]:
    """The value at ``path`` in a benchmark's JSON (keys, or indexes of lists)."""

    def read(result: Result) -> Any:
        value: Any = result
        for key in path:
            value = value[int(key)] if isinstance(value, list) else value[str(key)]
        return value

    return read


def per(
    numerator: Callable[[Result], Any], denominator: Callable[[Result], Any]
) -> Callable[[Result], float]:
    def read(result: Result) -> float:
        return round(float(numerator(result)) / float(denominator(result)), 2)

    return read


def count(label: str, *path: str | int, unit: str = "") -> Figure:
    return Figure(label, at(*path), "count", unit)


def shown(label: str, *path: str | int, unit: str = "") -> Figure:
    return Figure(label, at(*path), "shown", unit)


def ms(label: str, *path: str | int) -> Figure:
    return Figure(label, at(*path), "shown", "ms")


def seconds(label: str, *path: str | int) -> Figure:
    return Figure(label, at(*path), "shown", "s")


def ratio(label: str, read: Callable[[Result], Any], tolerance: float = 0.25) -> Figure:
    return Figure(label, read, "ratio", "x", tolerance=tolerance)


@dataclass(frozen=True)
class Bench:
    name: str
    figures: tuple[Figure, ...]
    args: tuple[str, ...] = ()
    about: str = ""

    @property
    def command(self) -> str:
        return " ".join(("bin/bench --only", self.name, *self.args))


def _benches() -> tuple[Bench, ...]:
    from tests.bench.figure_list import BENCHES

    return BENCHES


# Running -----------------------------------------------------------------------------


def database_url() -> str:
    """DATABASE_URL's server with a database named for this checkout: two checkouts'
    benchmarks never make and drop the same test database."""
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/capvco")
    server = base.rsplit("/", 1)[0]
    return f"{server}/capvco_bench_{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}"


def last_json_line(output: str) -> dict[str, Any] | None:
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def bench_run(bench: Bench, log_dir: Path) -> dict[str, Any]:
    """Runs one benchmark at its defaults; its JSON with the run's circumstances."""
    env = {**os.environ, "DATABASE_URL": database_url()}
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379")
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / f"{bench.name}.py"), *bench.args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    (log_dir / f"{bench.name}.log").write_text(done.stdout + done.stderr)
    result = last_json_line(done.stdout)
    return {
        "result": result,
        "returncode": done.returncode,
        "wall_s": round(wall, 1),
        "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "cpus": os.cpu_count(),
        "when": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": _commit(),
    }


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


# Reading and checking ------------------------------------------------------------------


def figure_value(figure: Figure, result: Result | None) -> Any:
    if result is None:
        return None
    try:
        return figure.read(result)
    except (KeyError, IndexError, TypeError, ZeroDivisionError):
        return None


def failures(bench: Bench, run: Mapping[str, Any]) -> list[str]:
    """Why a run of ``bench`` failed on its own: no JSON, a non-zero exit (its verdict), a
    figure missing."""
    result = run.get("result")
    if result is None:
        return [f"{bench.name}: printed no JSON line (exit {run.get('returncode')})"]
    problems = [f"{bench.name}: exited {run['returncode']}"] if run.get("returncode") else []
    return problems + missing(bench, result)


def missing(bench: Bench, result: Result) -> list[str]:
    """The figures of ``bench`` its JSON line lacks."""
    return [
        f"{bench.name}: no value for {figure.label!r}"
        for figure in bench.figures
        if figure_value(figure, result) is None
    ]


def moved(bench: Bench, recorded: Result | None, now: Result | None) -> list[str]:
    """The figures of ``bench`` that moved from ``recorded`` to ``now``: counts exactly,
    ratios past their tolerance."""
    problems = []
    for figure in bench.figures:
        if figure.kind == "shown":
            continue
        before, after = figure_value(figure, recorded), figure_value(figure, now)
        if before is None or after is None:
            if before != after:
                problems.append(
                    f"{bench.name}: {figure.label}: {fmt(figure, before)} -> {fmt(figure, after)}"
                )
            continue
        if figure.kind == "count" and before != after:
            problems.append(
                f"{bench.name}: {figure.label}: {fmt(figure, before)} -> {fmt(figure, after)}"
            )
        elif figure.kind == "ratio" and abs(float(after) - float(before)) > figure.tolerance * abs(
            float(before)
        ):
            problems.append(
                f"{bench.name}: {figure.label}: {fmt(figure, before)} -> {fmt(figure, after)} "
                f"(more than {figure.tolerance:.0%} apart)"
            )
    return problems


# Writing the docs ----------------------------------------------------------------------


def fmt(figure: Figure, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if figure.kind == "ratio":
        return f"{float(value):,.2f}{figure.unit}"
    if isinstance(value, float) and not value.is_integer():
        # Three significant digits below 100 (0.014 s, 8.17 s, 64.2 ms), whole above.
        text = f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    else:
        text = f"{int(value):,}"
    return f"{text} {figure.unit}".strip()


def table(bench: Bench, run: Mapping[str, Any] | None) -> str:
    """The figure table of ``bench`` as its recorded run gives it."""
    if not run:
        return f"Not run yet: `{bench.command}`."
    result = run.get("result")
    low, high = run.get("load", [None, None])
    lines = [
        f"`{bench.command}` ({bench.about or 'at its defaults'}); recorded {run.get('when')} "
        f"at {run.get('commit')}, {run.get('cpus')} CPUs, load {low} at the start and {high} "
        f"at the end, {run.get('wall_s')} s in all."
        + (
            f" The benchmark's own verdict failed (exit {run['returncode']}): see its targets."
            if run.get("returncode")
            else ""
        ),
        "",
    ]
    columns = list(dict.fromkeys(figure.column for figure in bench.figures))
    if columns == ["value"]:
        lines += ["| figure | value | checked |", "|---|---|---|"]
        for figure in bench.figures:
            value = fmt(figure, figure_value(figure, result))
            lines.append(f"| {figure.label} | {value} | {checked(figure)} |")
        return "\n".join(lines)
    # How each figure is checked goes in the header when a column holds one kind, else
    # after each row (whose figures then hold one kind).
    by_column = all(
        len({f.kind for f in bench.figures if f.column == column}) == 1 for column in columns
    )
    cells: dict[str, dict[str, str]] = {}
    kinds: dict[str, str] = {}
    for figure in bench.figures:
        cells.setdefault(figure.label, {})[figure.column] = fmt(
            figure, figure_value(figure, result)
        )
        kinds[figure.label] = checked(figure)
    if by_column:
        first = {column: next(f for f in bench.figures if f.column == column) for column in columns}
        header = [f"{column} ({checked(first[column])})" for column in columns]
    else:
        header = [*columns, "checked"]
    lines += ["| | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for label, row in cells.items():
        values = [row.get(c, "") for c in columns] + ([] if by_column else [kinds[label]])
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def checked(figure: Figure) -> str:
    """How --check compares the figure, as the docs' tables say it."""
    return {"count": "exactly", "ratio": f"±{figure.tolerance:.0%}", "shown": "not checked"}[
        figure.kind
    ]


BLOCK = re.compile(
    r"<!-- figures: (?P<name>\w+) -->\n(?P<body>.*?)\n?<!-- /figures: (?P=name) -->", re.S
)


def blocks(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def docs_rendered(record: Mapping[str, Any], benches: Iterable[Bench]) -> dict[Path, str]:
    """Every doc with figure blocks, as the record renders it."""
    by_name = {bench.name: bench for bench in benches}
    out = {}
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()

        def render(m: re.Match[str]) -> str:
            bench = by_name.get(m["name"])
            body = (
                table(bench, record.get(m["name"])) if bench else f"No benchmark named {m['name']}."
            )
            name = m["name"]
            return f"<!-- figures: {name} -->\n{body}\n<!-- /figures: {name} -->"

        new = BLOCK.sub(render, text)
        if new != text or BLOCK.search(text):
            out[path] = new
    return out


def comparison(
    before: Mapping[str, Any], after: Mapping[str, Any], benches: Iterable[Bench]
) -> str:
    """Every figure of two records side by side, as a Markdown table."""
    lines = ["| benchmark | figure | before | after |", "|---|---|---|---|"]
    for bench in benches:
        old = (before.get(bench.name) or {}).get("result")
        new = (after.get(bench.name) or {}).get("result")
        for figure in bench.figures:
            name = figure.label if figure.column == "value" else f"{figure.label}: {figure.column}"
            lines.append(
                f"| {bench.name} | {name} | {fmt(figure, figure_value(figure, old))} "
                f"| {fmt(figure, figure_value(figure, new))} |"
            )
    return "\n".join(lines)


def record_read() -> dict[str, Any]:
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


def main(argv: list[str] | None = None) -> int:
    benches = _benches()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the record; write nothing"
    )
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--docs", action="store_true", help="only rewrite the docs from the record")
    parser.add_argument(
        "--compare", type=Path, help="print a before (this record) / after (the docs') table"
    )
    parser.add_argument("--log-dir", type=Path, default=ROOT / "var" / "bench")
    args = parser.parse_args(argv)
    if args.compare:
        print(comparison(json.loads(args.compare.read_text()), record_read(), benches))
        return 0
    chosen = benches
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {bench.name for bench in benches}
        if unknown:
            parser.error(f"no benchmark named {', '.join(sorted(unknown))}")
        chosen = tuple(bench for bench in benches if bench.name in names)
    record = record_read()
    problems: list[str] = []
    if not args.docs:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        for bench in chosen:
            print(f"==> {bench.name} {' '.join(bench.args)}", flush=True)
            run = bench_run(bench, args.log_dir)
            print(f"    {run['wall_s']} s, load {run['load'][0]} -> {run['load'][1]}", flush=True)
            own = failures(bench, run)
            problems += own
            if args.check:
                problems += moved(
                    bench, (record.get(bench.name) or {}).get("result"), run["result"]
                )
            elif run["result"] is not None:
                # Recorded even when its verdict failed: the table then shows what missed.
                record[bench.name] = run
    if not args.check:
        RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        for path, text in docs_rendered(record, benches).items():
            path.write_text(text)
    for problem in problems:
        print(f"FAILED {problem}")
    print(f"logs in {args.log_dir}" if not args.docs else "docs rewritten from the record")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
