"""Injected failures, per operationId, deterministic for a given seed and call sequence.

A fault sees every call to its operation (``*``: to every operation, the IAM refresh
too, as a whitesky that is slow or down for the whole account). It lets the first
``skip`` pass, then fires on each call with probability ``rate`` (drawn from its own
seeded generator), at most ``times`` times. When several faults match a call, each
counts it (and draws), and only the first that would fire (in the order they were added)
fires and decides what happens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from simulator.whitesky.errors import BadRequest

LOST_RESPONSES = ("504", "drop")
EVERY_OPERATION = "*"


@dataclass
class Fault:
    id: int
    operation: str
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
        """Count the call; say whether this fault wants it."""
        if self.times is not None and self.fired >= self.times:
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        return self.rate >= 1.0 or self._rng.random() < self.rate

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "operation": self.operation,
            "status": self.status,
            "retry_after": self.retry_after,
            "latency_ms": self.latency_ms,
            "rate": self.rate,
            "seed": self.seed,
            "lost_response": self.lost_response,
            "times": self.times,
            "skip": self.skip,
            "seen": self.seen,
            "fired": self.fired,
        }


class FaultPlan:
    def __init__(self, default_seed: int = 0) -> None:
        self.default_seed = default_seed
        self.faults: list[Fault] = []
        self._next_id = 1

    def add(self, spec: object, known_operations: set[str]) -> Fault:
        if not isinstance(spec, dict):
            raise BadRequest("a fault is a JSON object")
        allowed = {
            "operation",
            "status",
            "retry_after",
            "latency_ms",
            "rate",
            "seed",
            "lost_response",
            "times",
            "skip",
        }
        unknown = set(spec) - allowed
        if unknown:
            raise BadRequest(f"unknown fault fields: {', '.join(sorted(unknown))}")
        operation = spec.get("operation")
        if operation != EVERY_OPERATION and operation not in known_operations:
            raise BadRequest(f"unknown operation {operation!r}")
        status = _optional_int(spec, "status", low=100, high=599)
        lost = spec.get("lost_response")
        if lost is not None and lost not in LOST_RESPONSES:
            raise BadRequest('lost_response must be "504", "drop" or null')
        if status is not None and lost is not None:
            raise BadRequest("a fault has either a status or a lost_response, not both")
        rate = spec.get("rate", 1.0)
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
            raise BadRequest("rate must be a number from 0 to 1")
        seed = _optional_int(spec, "seed", low=None, high=None)
        fault = Fault(
            id=self._next_id,
            operation=str(operation),
            status=status,
            retry_after=_optional_int(spec, "retry_after", low=0, high=None),
            latency_ms=_optional_int(spec, "latency_ms", low=0, high=600_000) or 0,
            rate=float(rate),
            # Without a seed of its own a fault still draws deterministically: the process
            # seed mixed with the fault's id.
            seed=seed if seed is not None else self.default_seed * 1_000_003 + self._next_id,
            lost_response=lost,
            times=_optional_int(spec, "times", low=0, high=None),
            skip=_optional_int(spec, "skip", low=0, high=None) or 0,
        )
        self._next_id += 1
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    def decide(self, operation: str) -> Fault | None:
        chosen = None
        for fault in self.faults:
            if (
                fault.operation in (operation, EVERY_OPERATION)
                and fault.would_fire()
                and chosen is None
            ):
                chosen = fault
        if chosen is not None:
            chosen.fired += 1
        return chosen


def _optional_int(
    spec: dict[str, Any], name: str, *, low: int | None, high: int | None
) -> int | None:
    value = spec.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer")
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{name} out of range")
    return value
