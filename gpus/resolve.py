"""Resolving a GPU type to one card (profile) of a location, in tiers; and whether a
pool's GPUs can ever fit there.

A location lists one profile per physical card, with the card's PCI address in the model,
so a type spans several profiles. Tiers: the exact profile id; the exact vendor + model
ignoring the PCI suffix and case; then the type-name rule (gpus.type_names), the one the
verification of a node's GPUs uses too. Of the matching cards, the
emptiest one with room for the whole count wins; when the type is there but no card has
room now, the machine waits for capacity (`GpuBusy`).

A machine's GPUs share one card, so a pool can ever run only if a card of its type holds
its count in all. whitesky lists only what is free on a card (`available_instances`), not
what it holds: a card's total is taken as what its last listing showed free plus what
the account's reservations hold on it (`card_totals`). Instances held by other customers
are not listed anywhere, so a total can be short of the card's real one; reservations made
since the listing count twice, so it is never short of what this account can reach.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from django.db.models import Count, Q

from gpus.models import BILLED_STATES, GpuProfile, VgpuReservation
from gpus.type_names import is_of_type, without_pci_address

if TYPE_CHECKING:
    from cloud.models import Location


class Card(Protocol):
    @property
    def profile_id(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def available_instances(self) -> int: ...


CAPACITY_WAIT = "waiting for capacity"


class GpuUnavailable(Exception):
    """No card of the type, or none with room: the message lists what the location offers."""


class GpuBusy(GpuUnavailable):
    """Cards of the type are there, none with room for the count now: the message begins
    with CAPACITY_WAIT and says what is free of the type; `offered`, what the location
    offers of every type (told once a wait lasts, `Machine.capacity_stuck_since`)."""

    def __init__(self, message: str, *, offered: str = "") -> None:
        super().__init__(message)
        self.offered = offered


def gpu_type_of(card: Card) -> str:
    """ "NVIDIA A100" for vendor "NVIDIA" and model "A100 0000:3b:00.0"."""
    model = without_pci_address(card.model)
    vendor = card.vendor.strip()
    if vendor and not model.lower().startswith(vendor.lower()):
        return f"{vendor} {model}"
    return model


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def matching_cards(
    cards: Sequence[Card], *, gpu_type: str = "", profile_id: str = ""
) -> list[Card]:
    if profile_id:
        return [c for c in cards if c.profile_id == profile_id]
    wanted = _normal(gpu_type)
    exact = [c for c in cards if _normal(gpu_type_of(c)) == wanted]
    if exact:
        return exact
    return [c for c in cards if is_of_type(gpu_type_of(c), gpu_type)]


@dataclass(frozen=True)
class TypeOffer:
    gpu_type: str
    cards: int
    free: int
    most_on_one_card: int

    def __str__(self) -> str:
        return (
            f"{self.gpu_type}: {self.free} free on {self.cards} card(s), "
            f"at most {self.most_on_one_card} on one card"
        )


def offers(cards: Sequence[Card]) -> list[TypeOffer]:
    by_type: dict[str, list[Card]] = {}
    for card in cards:
        by_type.setdefault(gpu_type_of(card), []).append(card)
    return [
        TypeOffer(
            gpu_type=gpu_type,
            cards=len(group),
            free=sum(c.available_instances for c in group),
            most_on_one_card=max(c.available_instances for c in group),
        )
        for gpu_type, group in sorted(by_type.items())
    ]


def offers_shown(cards: Sequence[Card]) -> str:
    """ "NVIDIA A100: 3 free on 4 card(s), at most 1 on one card; ..." of every type."""
    return "; ".join(str(o) for o in offers(cards)) or "no GPUs at all"


def gpu_profile_resolve(
    cards: Sequence[Card], *, location: str, count: int, gpu_type: str = "", profile_id: str = ""
) -> Card:
    """The emptiest matching card with room for `count` instances, or GpuUnavailable."""
    asked = f"profile {profile_id}" if profile_id else f"GPU type {gpu_type!r}"
    matches = matching_cards(cards, gpu_type=gpu_type, profile_id=profile_id)
    roomy = [c for c in matches if c.available_instances >= count]
    if roomy:
        return max(roomy, key=lambda c: (c.available_instances, c.profile_id))
    if matches:
        free = sum(c.available_instances for c in matches)
        most = max(c.available_instances for c in matches)
        what = f"card {profile_id}" if profile_id else gpu_type_of(matches[0])
        raise GpuBusy(
            f"{CAPACITY_WAIT}: {free} free of {what} at {location}, at most {most} on one "
            f"card; a machine needs {count} on one card",
            offered=offers_shown(cards),
        )
    offered = offers_shown(cards)
    raise GpuUnavailable(f"{location} has no {asked}. It offers: {offered}.")


class CardPicker:
    """`gpu_profile_resolve` for many requests over one set of cards, each in O(log cards).

    The matches of each asked type are found once; a heap per type holds its cards by
    free count, so the emptiest card with room is on top. `take` lowers a card's count;
    entries whose count went stale are refreshed as they come up."""

    def __init__(self, cards: Sequence[Card], *, location: str) -> None:
        self.cards = list(cards)
        self.location = location
        self._by_id = {card.profile_id: card for card in self.cards}
        self._taken: dict[str, int] = {}
        self._heaps: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
        # A refusal's message names every type's free count: kept until the next take.
        self._refusals: dict[tuple[str, str, int], GpuUnavailable] = {}
        # Ties go to the greatest profile id, as in gpu_profile_resolve.
        order = sorted(self._by_id, reverse=True)
        self._rank = {profile_id: rank for rank, profile_id in enumerate(order)}

    def free(self, profile_id: str) -> int:
        return self._by_id[profile_id].available_instances - self._taken.get(profile_id, 0)

    def pick(self, *, count: int, gpu_type: str = "", profile_id: str = "") -> str:
        """The card's profile id, or GpuUnavailable naming what the location offers."""
        key = (gpu_type, profile_id)
        heap = self._heaps.get(key)
        if heap is None:
            matches = matching_cards(self.cards, gpu_type=gpu_type, profile_id=profile_id)
            heap = [
                (-self.free(c.profile_id), self._rank[c.profile_id], c.profile_id) for c in matches
            ]
            heapq.heapify(heap)
            self._heaps[key] = heap
        while heap:
            free, rank, card_id = heap[0]
            if -free != self.free(card_id):
                heapq.heapreplace(heap, (-self.free(card_id), rank, card_id))
                continue
            if -free >= count:
                return card_id
            break
        refusal = self._refusals.get((*key, count))
        if refusal is None:
            refusal = self._unavailable(count=count, gpu_type=gpu_type, profile_id=profile_id)
            self._refusals[(*key, count)] = refusal
        if isinstance(refusal, GpuBusy):
            raise GpuBusy(str(refusal), offered=refusal.offered)
        raise GpuUnavailable(str(refusal))

    def take(self, profile_id: str, count: int) -> None:
        self._taken[profile_id] = self._taken.get(profile_id, 0) + count
        self._refusals.clear()

    def _unavailable(self, *, count: int, gpu_type: str, profile_id: str) -> GpuUnavailable:
        now = [_Free(c, self.free(c.profile_id)) for c in self.cards]
        try:
            gpu_profile_resolve(
                now, location=self.location, count=count, gpu_type=gpu_type, profile_id=profile_id
            )
        except GpuUnavailable as exc:
            return exc
        raise AssertionError("the heap and the cards disagree")  # pragma: no cover


@dataclass(frozen=True)
class _Free:
    card: Card
    available_instances: int

    @property
    def profile_id(self) -> str:
        return self.card.profile_id

    @property
    def vendor(self) -> str:
        return self.card.vendor

    @property
    def model(self) -> str:
        return self.card.model


# --- whether a pool's GPUs can ever fit -------------------------------------------------


@dataclass(frozen=True)
class TypeRoom:
    """A GPU type of a location, and the most instances one card of it holds in all."""

    gpu_type: str
    per_card: int


def rooms(cards: Sequence[Card], totals: Mapping[str, int]) -> list[TypeRoom]:
    """Each type of the cards, with its roomiest card's total (`totals` by profile id; a
    card missing there counts what is free on it)."""
    by_type: dict[str, int] = {}
    for card in cards:
        total = totals.get(card.profile_id, card.available_instances)
        by_type[gpu_type_of(card)] = max(by_type.get(gpu_type_of(card), 0), total)
    return [TypeRoom(gpu_type, most) for gpu_type, most in sorted(by_type.items())]


def offered(location: str, found: Sequence[TypeRoom]) -> str:
    """ "nl-dc01 offers NVIDIA A100 (up to 4 per card), NVIDIA L4 (up to 2)"."""
    if not found:
        return f"{location} offers no GPUs"
    parts = [
        f"{room.gpu_type} (up to {room.per_card}{' per card' if i == 0 else ''})"
        for i, room in enumerate(found)
    ]
    return f"{location} offers {', '.join(parts)}"


@dataclass(frozen=True)
class FitRefusal:
    """Why a pool's GPUs can never run at a location, on the pool field that is wrong.
    `waits`: not known yet (the location was never observed): ask again later."""

    field: Literal["gpu_type", "gpu_profile_id", "gpu_count"]
    message: str
    waits: bool = False


def fit_refusal(
    cards: Sequence[Card],
    totals: Mapping[str, int],
    *,
    location: str,
    count: int,
    gpu_type: str = "",
    profile_id: str = "",
) -> FitRefusal | None:
    """None when a card of the type (or the profile) holds `count` instances in all: the
    pool fits in principle, if perhaps not now."""
    if count <= 0:
        return None
    matches = matching_cards(cards, gpu_type=gpu_type, profile_id=profile_id)
    there = offered(location, rooms(cards, totals))
    if not matches:
        if profile_id:
            return FitRefusal("gpu_profile_id", f"No card {profile_id!r} in {location}: {there}.")
        return FitRefusal(
            "gpu_type", f"GPU type {gpu_type!r} is not offered in {location}: {there}."
        )
    if count <= max(totals.get(c.profile_id, c.available_instances) for c in matches):
        return None
    what = f"card {profile_id!r}" if profile_id else f"type {gpu_type!r}"
    return FitRefusal(
        "gpu_count",
        f"{count} GPUs of {what} on one machine can never fit in {location}: a machine's "
        f"GPUs share one card, and {there}.",
    )


def card_totals(location: Location, cards: Sequence[GpuProfile]) -> dict[str, int]:
    """Each card's total instances: free as last listed, plus what the account's
    reservations hold on it (those released since that listing began included: the
    listing still counted them)."""
    held = Q(state__in=BILLED_STATES)
    if location.observation_started_at is not None:
        held |= Q(released_at__gt=location.observation_started_at)
    counts = dict(
        VgpuReservation.objects.filter(held, location=location)
        .values_list("gpu_id")
        .annotate(n=Count("pk"))
        .values_list("gpu_id", "n")
    )
    return {c.profile_id: c.available_instances + counts.get(c.profile_id, 0) for c in cards}


def location_fit_refusal(
    location: Location, *, count: int, gpu_type: str = "", profile_id: str = ""
) -> FitRefusal | None:
    """`fit_refusal` on the location's cards as mirrored. A location never observed has
    no cards to judge by: that refusal waits."""
    if count <= 0:
        return None
    cards = list(GpuProfile.objects.filter(location=location).order_by("profile_id"))
    if not cards and location.last_complete_observation_at is None:
        field: Literal["gpu_type", "gpu_profile_id"] = (
            "gpu_profile_id" if profile_id else "gpu_type"
        )
        return FitRefusal(
            field,
            f"{location.name} has not been observed yet, so its GPU cards are not known: "
            "try again after its first observation (right after its account is added).",
            waits=True,
        )
    return fit_refusal(
        cards,
        card_totals(location, cards),
        location=location.name,
        count=count,
        gpu_type=gpu_type,
        profile_id=profile_id,
    )
