"""What a node's pods can use of its GPUs, as nvidia-smi prints it, held against what the
cloud bills for the node.

The verification pod runs COMMAND; `parse_query` reads its output (or the same query with
a header line, whose column names and units then say what each value is), `judge` gives
the verdict. Both are pure: the Job, the log and where the verdict is kept are elsewhere.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpus.type_names import is_of_type

QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "mig.mode.current",
    "compute_cap",
)
COMMAND = f"nvidia-smi --query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits"

# What nvidia-smi prints for a value the GPU or the driver does not give.
_NO_VALUE = frozenset({"", "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]"})
_UNIT = re.compile(r"\s*\[[^\]]*\]$")  # a header's " [MiB]"
_MIB = re.compile(r"(\d+)(?: MiB)?")
_VERSION = re.compile(r"\d+(?:\.\d+)*")
_SHOWN = 120  # of a garbage line, the characters an error quotes


class ProbeError(ValueError):
    """The output is not what the query prints: the message names the line."""


@dataclass(frozen=True)
class GpuSeen:
    """One GPU as the node's pods see it; None where nvidia-smi gave no value."""

    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    memory_mib: int | None = None
    mig_mode: str | None = None
    compute_cap: str | None = None


def parse_query(text: str, fields: Sequence[str] = QUERY_FIELDS) -> tuple[GpuSeen, ...]:
    """The GPUs of nvidia-smi's `--query-gpu` CSV. `fields`: the query's columns, in
    order, for output without a header; a header line names them itself."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if lines and lines[0][1].split(",")[0].strip() == "index":
        fields = [_UNIT.sub("", cell.strip()) for cell in lines[0][1].split(",")]
        lines = lines[1:]
    for needed in ("index", "name"):
        if needed not in fields:
            raise ProbeError(f"the query has no {needed!r} column: {', '.join(fields)}")
    return tuple(_gpu(n, line, fields) for n, line in lines)


def _gpu(n: int, line: str, fields: Sequence[str]) -> GpuSeen:
    shown = line if len(line) <= _SHOWN else f"{line[:_SHOWN]}..."
    cells = [cell.strip() for cell in line.split(",")]
    if len(cells) != len(fields):
        raise ProbeError(f"line {n} has {len(cells)} values, not {len(fields)}: {shown!r}")
    row = {f: v for f, v in zip(fields, cells, strict=True) if v not in _NO_VALUE}

    def bad(field: str, expected: str) -> ProbeError:
        return ProbeError(f"line {n}: {field} {row[field]!r} is not {expected}: {shown!r}")

    if not row.get("index", "").isdigit():
        raise ProbeError(f"line {n}: the index is not a number: {shown!r}")
    if "name" not in row:
        raise ProbeError(f"line {n}: the GPU has no name: {shown!r}")
    memory = None
    if "memory.total" in row:
        if not (found := _MIB.fullmatch(row["memory.total"])):
            raise bad("memory.total", "a number of MiB")
        memory = int(found.group(1))
    driver = row.get("driver_version")
    if driver is not None and not _VERSION.fullmatch(driver):
        raise bad("driver_version", "a version")
    return GpuSeen(
        index=int(row["index"]),
        name=row["name"],
        uuid=row.get("uuid"),
        pci_bus_id=row.get("pci.bus_id"),
        driver_version=driver,
        memory_mib=memory,
        mig_mode=row.get("mig.mode.current"),
        compute_cap=row.get("compute_cap"),
    )


def _version(text: str) -> tuple[int, ...]:
    if not _VERSION.fullmatch(text):
        raise ValueError(f"{text!r} is not a driver version (numbers between dots)")
    return tuple(int(part) for part in text.split("."))


def driver_at_least(version: str, minimum: str) -> bool:
    """ "550.54.15" is at least "535.104.05": numbers compared part by part."""
    return _version(version) >= _version(minimum)


@dataclass(frozen=True)
class Verdict:
    """verified, mismatch (the reasons, each with both sides), or failed (the pod did not
    run; its reason, which the caller knows)."""

    status: Literal["verified", "mismatch", "failed"]
    reasons: tuple[str, ...] = ()

    @classmethod
    def failed(cls, reason: str) -> Verdict:
        return cls("failed", (reason,))


def _seen_shown(seen: Sequence[GpuSeen]) -> str:
    """ "1 x NVIDIA A10", "2 x NVIDIA H200, 1 x NVIDIA L4", or "no GPU"."""
    counts = Counter(gpu.name for gpu in seen)
    return ", ".join(f"{n} x {name}" for name, n in counts.items()) or "no GPU"


def judge(seen: Sequence[GpuSeen], billed_type: str, billed_count: int, driver_min: str) -> Verdict:
    """Whether the node's pods see what is billed: the count, each GPU of the billed type
    (gpus.type_names), and each driver at least `driver_min` when it is set."""
    reasons = []
    if len(seen) != billed_count or not all(is_of_type(gpu.name, billed_type) for gpu in seen):
        reasons.append(f"billed {billed_type} x {billed_count}, the node sees {_seen_shown(seen)}")
    if driver_min:
        for driver in sorted({gpu.driver_version or "" for gpu in seen}):
            if not driver:
                reasons.append(f"the driver's version is not shown; the pool's is {driver_min}")
            elif not driver_at_least(driver, driver_min):
                reasons.append(f"driver {driver} is older than the pool's {driver_min}")
    return Verdict("mismatch", tuple(reasons)) if reasons else Verdict("verified")
