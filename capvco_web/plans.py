"""One way to carry out a plan, whichever app planned it: the step protocol, the one
dispatcher (`plan_apply`) and the record of each pass (`PassRecord`, kept as `PlanPass`).

A plan is a list of frozen steps, one class per kind, each naming its objects by id and
carrying every decision (`kind`, `target`, `reason`, `describe()`, `calls()`). The caller
passes the function that acts on one step: no registry, so nothing below calls up into an
app. The act function returns when the step ran (or "sent", handed to a worker) and raises
`StepDropped` (its rows changed since the plan), `StepWaiting` (something still in flight)
or `StepFailed`/one of `failures` (a message to show). A step with a `blocked` reason is
not acted on (`on_blocked` may record why on its row) and is recorded as blocked.

The dry run goes through the same function: every step's calls are listed and none made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from django.conf import settings
from django.db import connection
from django.utils import timezone

from capvco_web.integrations.whitesky import operations as ops

WHITESKY_OPERATIONS = frozenset(op.operation_id for op in ops.ALL_OPERATIONS)


@dataclass(frozen=True, order=True)
class Call:
    """One mutating call a step makes: the service, its verb and the object it names. A VM is named
    by its id, or by its name when the same step makes it; a reserve by "<VM>/<card>".

    One vocabulary: a whitesky verb is the call's operationId in whitesky's API description
    (`createVirtualMachine`), a Kubernetes verb the HTTP method on the resource's path."""

    verb: str
    object: str
    maybe: bool = field(default=False, compare=False)
    """Made only if what the last listing could not show holds (a VM in the recycle bin)."""
    service: Literal["whitesky", "kubernetes"] = "whitesky"

    def __post_init__(self) -> None:
        if self.service == "whitesky" and self.verb not in WHITESKY_OPERATIONS:
            raise ValueError(f"{self.verb}: not an operationId of the whitesky client")

    def __str__(self) -> str:
        return f"{self.service} {self.verb} {self.object}{' (if needed)' if self.maybe else ''}"


class PlanStep(Protocol):
    """What every plan's step offers, whatever it changes (whitesky or Kubernetes)."""

    @property
    def kind(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def reason(self) -> str: ...
    def describe(self) -> str: ...
    def calls(self) -> tuple[Call, ...]: ...


class StepFailed(Exception):
    """A step cannot go on until something changes: recorded with this message."""


class StepWaiting(Exception):
    """A step must wait (a listing, an outcome still in flight, a busy row): tried next pass."""


class StepDropped(Exception):
    """What the step was planned on changed: nothing is done, the next pass plans again."""


Outcome = Literal["ran", "sent", "blocked", "dropped", "waiting", "failed", "planned"]
Scope = Literal["cluster", "location", "nics", "pools"]


@dataclass(frozen=True)
class StepOutcome:
    kind: str
    target: str
    outcome: Outcome
    message: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.target}" + (f": {self.message}" if self.message else "")


@dataclass
class PassRecord:
    """What one pass planned, what ran, what did not and why, and how long each phase took."""

    scope: Scope
    scope_id: int
    started_at: datetime
    steps: Sequence[PlanStep]
    outcomes: list[StepOutcome] = field(default_factory=list)
    plan_ms: int = 0
    act_ms: int = 0
    dry_run: bool = False

    def of(self, *outcomes: Outcome) -> list[StepOutcome]:
        return [o for o in self.outcomes if o.outcome in outcomes]

    @property
    def calls(self) -> list[Call]:
        """The calls the plan makes (the dry run's answer)."""
        return [call for step in self.steps for call in step.calls()]

    def save(self) -> None:
        """Kept as a row (a dry run is not), with only the last PLAN_PASSES_KEPT of its scope."""
        if self.dry_run:
            return
        from capvco_web.models import PlanPass

        PlanPass.objects.create(
            scope=self.scope,
            scope_id=self.scope_id,
            started_at=self.started_at,
            planned=[{"kind": s.kind, "target": s.target, "reason": s.reason} for s in self.steps],
            outcomes=[
                {"kind": o.kind, "target": o.target, "outcome": o.outcome, "message": o.message}
                for o in self.outcomes
            ],
            plan_ms=self.plan_ms,
            act_ms=self.act_ms,
        )
        # One statement, outside a transaction of its own: every row of the scope older
        # than the last kept. (QuerySet.delete() would wrap it in BEGIN and COMMIT.)
        table = connection.ops.quote_name(PlanPass._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE scope = %s AND scope_id = %s AND id < ("  # noqa: S608
                f"SELECT id FROM {table} WHERE scope = %s AND scope_id = %s"
                " ORDER BY id DESC LIMIT 1 OFFSET %s)",
                [self.scope, self.scope_id] * 2 + [settings.PLAN_PASSES_KEPT - 1],
            )


class Stopwatch:
    """Milliseconds since it was made (or last read with `lap`)."""

    def __init__(self) -> None:
        self.at = time.perf_counter()

    def lap(self) -> int:
        now = time.perf_counter()
        ms, self.at = round((now - self.at) * 1000), now
        return ms


def plan_apply(
    steps: Sequence[PlanStep],
    act: Callable[[PlanStep], Outcome | None],
    *,
    scope: Scope,
    scope_id: int,
    started_at: datetime | None = None,
    plan_ms: int = 0,
    dry_run: bool = False,
    on_blocked: Callable[[PlanStep], object] | None = None,
    failures: tuple[type[Exception], ...] = (),
) -> PassRecord:
    """Carry out a plan, step by step, in its order; answer the pass's record. A dry run
    calls nothing: the record lists the plan, each step `planned`, and its `calls`."""
    record = PassRecord(
        scope, scope_id, started_at or timezone.now(), steps, plan_ms=plan_ms, dry_run=dry_run
    )
    watch = Stopwatch()
    for step in steps:
        record.outcomes.append(_step_apply(step, act, dry_run, on_blocked, failures))
    record.act_ms = watch.lap()
    return record


def _step_apply(
    step: PlanStep,
    act: Callable[[PlanStep], Outcome | None],
    dry_run: bool,
    on_blocked: Callable[[PlanStep], object] | None,
    failures: tuple[type[Exception], ...],
) -> StepOutcome:
    def outcome(what: Outcome, message: object = "") -> StepOutcome:
        return StepOutcome(step.kind, step.target, what, str(message))

    if dry_run:
        return outcome("planned")
    blocked: str = getattr(step, "blocked", "")
    try:
        if blocked:
            if on_blocked is not None:
                on_blocked(step)  # records why on its row, if still as planned
            return outcome("blocked", blocked)
        done = act(step)
    except StepDropped as exc:
        return outcome("dropped", exc)
    except StepWaiting as exc:
        return outcome("waiting", exc)
    except StepFailed as exc:
        return outcome("failed", exc)
    except failures as exc:  # the caller's kinds of failure (a refused call)
        return outcome("failed", exc)
    return outcome(done or "ran")
