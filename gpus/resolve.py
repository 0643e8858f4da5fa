"""Resolving a GPU type to one card (profile) of a location, in tiers.

A location lists one profile per physical card, with the card's PCI address in the model,
so a type spans several profiles. Tiers: the exact profile id; the exact vendor + model
ignoring the PCI suffix and case; then a contains match. Of the matching cards, the
emptiest one with room for the whole count wins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

_PCI_SUFFIX = re.compile(r"\s*\(?(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\)?\s*$")


class Card(Protocol):
    @property
    def profile_id(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def available_instances(self) -> int: ...


class GpuUnavailable(Exception):
    """No card of the type, or none with room: the message lists what the location offers."""


def gpu_type_of(card: Card) -> str:
    """ "NVIDIA A100" for vendor "NVIDIA" and model "A100 0000:3b:00.0"."""
    model = _PCI_SUFFIX.sub("", card.model).strip()
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
    return [c for c in cards if wanted in _normal(gpu_type_of(c))]


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


def gpu_profile_resolve(
    cards: Sequence[Card], *, location: str, count: int, gpu_type: str = "", profile_id: str = ""
) -> Card:
    """The emptiest matching card with room for `count` instances, or GpuUnavailable."""
    asked = f"profile {profile_id}" if profile_id else f"GPU type {gpu_type!r}"
    matches = matching_cards(cards, gpu_type=gpu_type, profile_id=profile_id)
    roomy = [c for c in matches if c.available_instances >= count]
    if roomy:
        return max(roomy, key=lambda c: (c.available_instances, c.profile_id))
    offered = "; ".join(str(o) for o in offers(cards)) or "no GPUs at all"
    if not matches:
        problem = f"{location} has no {asked}"
    else:
        problem = f"{location} has no card of {asked} with {count} free instance(s)"
    raise GpuUnavailable(f"{problem}. It offers: {offered}.")
