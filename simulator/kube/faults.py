"""Injected failures, per operation (`list pods`, `patch nodes`, `get nodes/status`, ...),
deterministic for a given seed and call sequence, as in the whitesky simulator.

A fault sees every call to its operation (of its cluster, when it names one). It lets the
first `skip` pass, then fires with probability `rate`, at most `times` times. Firing:
wait `latency_ms` (alone, that is all: a client with a shorter read timeout gives up),
then answer `status` with a Status body (a 410 is the "continue token expired" answer),
or else act and lose the answer (`lost_response`: "drop" closes the connection with no
answer, "truncate" sends half the body and closes it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

LOST_RESPONSES = ("drop", "truncate")
FIELDS = {
    "operation", "cluster", "status", "retry_after", "latency_ms", "rate", "seed",
    "lost_response", "times", "skip",
}  # fmt: skip


class FaultSpecError(ValueError):
    pass


@dataclass
class Fault:
    id: int
    operation: str
    cluster: str | None = None
    status: int | None = None
    retry_after: int | None = None
    latency_ms: int = 0
    rate: float = 1.0
    seed: int = 0
    lost_response: str | None = None
    times: int | None = None
    skip: int = 0
    seen: int = 0
    fired: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def would_fire(self) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        return self.rate >= 1.0 or self._rng.random() < self.rate

    def describe(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in sorted(FIELDS | {"id", "seen", "fired"})}


class FaultPlan:
    def __init__(self, default_seed: int = 0) -> None:
        self.default_seed = default_seed
        self.faults: list[Fault] = []
        self._next_id = 1

    def add(self, spec: object) -> Fault:
        if not isinstance(spec, dict):
            raise FaultSpecError("a fault is a JSON object")
        unknown = set(spec) - FIELDS
        if unknown:
            raise FaultSpecError(f"unknown fault fields: {', '.join(sorted(unknown))}")
        operation = spec.get("operation")
        if not isinstance(operation, str) or not operation.strip():
            raise FaultSpecError('"operation" is required, e.g. "list pods" or "patch nodes"')
        status = spec.get("status")
        if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
            raise FaultSpecError('"status" must be an HTTP error status (400-599)')
        lost = spec.get("lost_response")
        if lost is not None and lost not in LOST_RESPONSES:
            raise FaultSpecError(f'"lost_response" must be one of {", ".join(LOST_RESPONSES)}')
        if status is not None and lost is not None:
            raise FaultSpecError('a fault has a "status" or a "lost_response", not both')
        rate = float(spec.get("rate", 1.0))
        if not 0.0 <= rate <= 1.0:
            raise FaultSpecError('"rate" must be between 0 and 1')
        fault = Fault(
            id=self._next_id,
            operation=operation.strip(),
            cluster=spec.get("cluster"),
            status=status,
            retry_after=spec.get("retry_after"),
            latency_ms=int(spec.get("latency_ms", 0)),
            rate=rate,
            seed=int(spec.get("seed", self.default_seed)),
            lost_response=lost,
            times=spec.get("times"),
            skip=int(spec.get("skip", 0)),
        )
        self._next_id += 1
        self.faults.append(fault)
        return fault

    def decide(self, operation: str, cluster: str) -> Fault | None:
        """The fault that fires for this call, if any; every matching fault counts it."""
        chosen = None
        for fault in self.faults:
            if fault.operation not in (operation, "*"):
                continue
            if fault.cluster is not None and fault.cluster != cluster:
                continue
            if fault.would_fire() and chosen is None:
                chosen = fault
        if chosen is not None:
            chosen.fired += 1
        return chosen
