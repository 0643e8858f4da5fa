"""What the dashboard's pages show, read from the database in a fixed number of queries
whatever the number of rows. Each takes querysets the caller already narrowed to what
the user may see."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from clusters.models import Location, Machine, MachinePool
from gpus import naming
from gpus.models import BILLED_STATES, GpuProfile, VgpuReservation, cost_of, hourly_price
from gpus.resolve import GpuUnavailable, gpu_profile_resolve, gpu_type_of, matching_cards, offers

State = VgpuReservation.State
HOUR = Decimal(3600)

# --- capacity ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityRow:
    """One GPU type in one location: its cards and what their instances are doing."""

    location: Location
    gpu_type: str
    cards: int
    free: int
    most_on_one_card: int
    reserved: int  # billed and on no VM (reserving, reserved, releasing)
    attached: int

    @property
    def total(self) -> int:
        return self.free + self.reserved + self.attached

    def link(self, state: str = "") -> str:
        query = {"location": self.location.pk, "type": self.gpu_type}
        return "?" + urlencode({**query, "state": state} if state else query)


def capacity_board(
    *, cards: QuerySet[GpuProfile], reservations: QuerySet[VgpuReservation]
) -> list[CapacityRow]:
    """Location by GPU type: cards, free instances as last listed, the most that still fit
    on one card, and our mirror's reservations on those cards."""
    by_location: dict[int, list[GpuProfile]] = defaultdict(list)
    locations: dict[int, Location] = {}
    for card in cards.select_related("location").order_by("location__name", "profile_id"):
        by_location[card.location_id].append(card)
        locations[card.location_id] = card.location
    counts: dict[tuple[int, str, str], int] = {
        (location_id, gpu_id, state): n
        for location_id, gpu_id, state, n in reservations.filter(state__in=BILLED_STATES)
        .values_list("location_id", "gpu_id", "state")
        .annotate(n=Count("pk"))
        .values_list("location_id", "gpu_id", "state", "n")
        .order_by()
    }
    board = []
    for location_id, group in by_location.items():
        for offer in offers(group):
            ids = [c.profile_id for c in group if gpu_type_of(c) == offer.gpu_type]
            held = {
                state: sum(counts.get((location_id, gpu_id, state), 0) for gpu_id in ids)
                for state in BILLED_STATES
            }
            board.append(
                CapacityRow(
                    location=locations[location_id],
                    gpu_type=offer.gpu_type,
                    cards=offer.cards,
                    free=offer.free,
                    most_on_one_card=offer.most_on_one_card,
                    reserved=held[State.RESERVING] + held[State.RESERVED] + held[State.RELEASING],
                    attached=held[State.ATTACHED],
                )
            )
    return board


# --- money: billed but not used ---------------------------------------------------------


@dataclass(frozen=True)
class Waste:
    """Reservations of one kind in one location: billed, and doing nothing for us."""

    location: Location
    count: int
    oldest: datetime | None
    hours: Decimal  # summed over the reservations, since each began to waste
    link: str  # the query of the list behind it

    @property
    def hourly_cost(self) -> Decimal:
        return (self.count * hourly_price(self.location.vgu_price)).quantize(Decimal("0.01"))

    @property
    def accrued_cost(self) -> Decimal:
        return cost_of(self.hours, self.location.vgu_price)


@dataclass(frozen=True)
class CurrencyTotal:
    currency: str
    count: int
    hourly_cost: Decimal
    accrued_cost: Decimal


@dataclass
class WasteKind:
    key: str
    title: str
    explanation: str
    query: dict[str, str]
    rows: list[Waste] = field(default_factory=list)

    @property
    def totals(self) -> list[CurrencyTotal]:
        by_currency: dict[str, list[Waste]] = defaultdict(list)
        for row in self.rows:
            by_currency[row.location.currency].append(row)
        return [
            CurrencyTotal(
                currency=currency,
                count=sum(r.count for r in rows),
                hourly_cost=sum((r.hourly_cost for r in rows), Decimal(0)),
                accrued_cost=sum((r.accrued_cost for r in rows), Decimal(0)),
            )
            for currency, rows in sorted(by_currency.items())
        ]

    @property
    def count(self) -> int:
        return sum(r.count for r in self.rows)

    @property
    def oldest(self) -> datetime | None:
        return min((r.oldest for r in self.rows if r.oldest), default=None)

    def link(self, location: Location | None = None) -> str:
        query = {**self.query, "location": str(location.pk)} if location else self.query
        return "?" + urlencode(query)


OURS = Q(name__startswith=naming.PREFIX)


@dataclass(frozen=True)
class WasteRule:
    key: str
    title: str
    explanation: str
    query: dict[str, str]  # the filters of the list behind it
    which: Q  # of the billed reservations
    since: Any  # an expression: when each began to waste


WASTE_RULES = [
    WasteRule(
        "unassigned",
        "Billed, on no VM",
        "Reservations attached to no VM: whitesky bills them all the same.",
        {"unassigned": "true"},
        Q(state=State.RESERVED, vm_id__isnull=True),
        Coalesce("unassigned_since", "created_at"),
    ),
    WasteRule(
        "orphans",
        "Orphans",
        "Named by us, and no machine owns them: released after the grace period, or by a person.",
        {"orphaned": "true", "not_ours": "false"},
        Q(orphaned_since__isnull=False) & OURS,
        F("orphaned_since"),
    ),
    WasteRule(
        "leaks",
        "Not named by us",
        "Reservations of the account that we did not make: only a person releases them.",
        {"orphaned": "true", "not_ours": "true"},
        Q(orphaned_since__isnull=False) & ~OURS,
        F("orphaned_since"),
    ),
]


def money_wasted(
    *, reservations: QuerySet[VgpuReservation], locations: Iterable[Location], now: datetime
) -> list[WasteKind]:
    """Per kind (billed on no VM, orphans, not named by us) and location: how many, what
    they cost per hour, what they cost since they began to waste, the oldest. One query."""
    moment = Value(now, output_field=DateTimeField())
    aggregates: dict[str, Any] = {}
    for rule in WASTE_RULES:
        age = ExpressionWrapper(moment - rule.since, output_field=DurationField())
        aggregates[f"{rule.key}_n"] = Count("pk", filter=rule.which)
        aggregates[f"{rule.key}_age"] = Sum(age, filter=rule.which)
        aggregates[f"{rule.key}_oldest"] = Min(rule.since, filter=rule.which)
    rows: Iterable[Any] = (
        reservations.filter(state__in=BILLED_STATES)
        .values("location_id")
        .annotate(**aggregates)
        .order_by()
    )
    by_id = {location.pk: location for location in locations}
    kinds = [WasteKind(r.key, r.title, r.explanation, r.query) for r in WASTE_RULES]
    for row in rows:
        location = by_id.get(row["location_id"])
        if location is None:
            continue
        for kind in kinds:
            if n := row[f"{kind.key}_n"]:
                wasted: timedelta = row[f"{kind.key}_age"] or timedelta(0)
                kind.rows.append(
                    Waste(
                        location=location,
                        count=n,
                        oldest=row[f"{kind.key}_oldest"],
                        hours=Decimal(wasted.total_seconds()) / HOUR,
                        link=kind.link(location),
                    )
                )
    for kind in kinds:
        kind.rows.sort(key=lambda w: w.location.name)
    return kinds


# --- observation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    location: Location
    age: timedelta | None  # since the last complete observation began; None: never
    stale: bool


def observations(
    *, locations: Sequence[Location], now: datetime, interval: timedelta
) -> list[Observation]:
    """Each location's last complete observation, stale past two observe intervals."""
    found = []
    for location in locations:
        last = location.last_complete_observation_at
        age = now - last if last else None
        found.append(Observation(location, age, age is None or age > 2 * interval))
    return found


# --- clusters ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolGpus:
    """How a pool's GPU type resolves in its site: the cards it matches, and the one the
    next machine's vGPUs would go on (or why none would)."""

    cards: int
    free: int
    next_card: str
    problem: str


def pool_gpus(pool: MachinePool, cards: Sequence[GpuProfile]) -> PoolGpus | None:
    if not pool.wants_gpus:
        return None
    here = [c for c in cards if c.location_id == pool.site.location_id]
    matches = matching_cards(here, gpu_type=pool.gpu_type, profile_id=pool.gpu_profile_id)
    try:
        card = gpu_profile_resolve(
            here,
            location=pool.site.location.name,
            count=pool.gpu_count,
            gpu_type=pool.gpu_type,
            profile_id=pool.gpu_profile_id,
        )
    except GpuUnavailable as exc:
        return PoolGpus(len(matches), sum(c.available_instances for c in matches), "", str(exc))
    label = f"{card.profile_id} ({gpu_type_of(card)}, {card.available_instances} free)"
    return PoolGpus(len(matches), sum(c.available_instances for c in matches), label, "")


def held_by_machine(
    reservations: QuerySet[VgpuReservation], machines: Sequence[Machine]
) -> dict[int, list[VgpuReservation]]:
    """The billed vGPUs of each machine, in one query."""
    held: dict[int, list[VgpuReservation]] = defaultdict(list)
    rows = reservations.filter(
        machine__in=[m.pk for m in machines], state__in=BILLED_STATES
    ).order_by("machine_id", "owner_index", "pk")
    for row in rows:
        assert row.machine_id is not None
        held[row.machine_id].append(row)
    return held


# --- a new cluster: will it fit ----------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """How many of a pool's machines the cards of its type in its location hold now."""

    machines: int
    replicas: int
    free: int
    most_on_one_card: int
    offered: str  # what the location offers, when the type is not there

    @property
    def fits(self) -> bool:
        return self.machines >= self.replicas

    def __str__(self) -> str:
        if self.offered:
            return f"not offered here; the location offers {self.offered}"
        room = f"{self.free} free, at most {self.most_on_one_card} on one card"
        if self.fits:
            return f"fits: all {self.replicas} machines ({room})"
        return f"only {self.machines} of {self.replicas} machines fit now ({room})"


def pool_fit(
    cards: Sequence[GpuProfile], *, gpu_type: str, count: int, replicas: int
) -> Fit | None:
    """Place the pool's machines as the reconciler would, each on the emptiest card with
    room for all its GPUs, on the cards as last listed. None: a pool without GPUs."""
    if not (gpu_type and count):
        return None
    matches = matching_cards(cards, gpu_type=gpu_type)
    if not matches:
        offered = "; ".join(str(o) for o in offers(cards)) or "no GPUs at all"
        return Fit(0, replicas, 0, 0, offered)
    free = [c.available_instances for c in matches]
    placed = 0
    for _ in range(replicas):
        emptiest = max(range(len(free)), key=lambda i: free[i])
        if free[emptiest] < count:
            break
        free[emptiest] -= count
        placed += 1
    total = sum(c.available_instances for c in matches)
    return Fit(placed, replicas, total, max(c.available_instances for c in matches), "")
