"""GPU capacity per location and type: the cards whitesky lists, what our reservations
hold of them, and what Kubernetes sees of each type. Read by the dashboard's board and by
the hourly capacity history (billing)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from django.db.models import Count, QuerySet

from capvco_web.integrations.kube import gpu_label_value
from cloud.models import Location
from gpus.models import BILLED_STATES, GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of, offers

State = VgpuReservation.State


@dataclass(frozen=True)
class KubeGpus:
    """GPUs of one type in one location as Kubernetes sees them (summed by
    `kube.selectors.kube_gpus_by_location_and_type`)."""

    allocatable: int  # what the nodes advertise (nvidia.com/gpu)
    requested: int  # what pending and running pods placed on them ask for


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
    # Kubernetes: what the nodes of our machines here advertise as nvidia.com/gpu (and, when
    # asked for, what pods on them request), for the type labelled `label` on the nodes.
    label: str = ""
    kube_allocatable: int = 0
    kube_requested: int = 0

    @property
    def total(self) -> int:
        return self.free + self.reserved + self.attached

    def link(self, state: str = "") -> str:
        query = {"location": self.location.pk, "type": self.gpu_type}
        return "?" + urlencode({**query, "state": state} if state else query)

    @property
    def nodes_link(self) -> str:
        """The query of the node list behind the Kubernetes figures."""
        query = {"location": self.location.pk, "gpu_type": self.label}
        return "?" + urlencode(query if self.label else {"location": self.location.pk})


def capacity_board(
    *,
    cards: QuerySet[GpuProfile],
    reservations: QuerySet[VgpuReservation],
    kube: Mapping[tuple[int, str], KubeGpus] | None = None,
    locations: Sequence[Location] = (),
) -> list[CapacityRow]:
    """Location by GPU type: cards, free instances as last listed, the most that still fit
    on one card, and our mirror's reservations on those cards; with `kube`
    (`kube.selectors.kube_gpus_by_location_and_type`), the GPUs Kubernetes sees of
    each type, matched by label value ("NVIDIA A100" meets `nvidia-a100`). A type only
    Kubernetes knows here (no card listed, or nodes without a type label) gets a row of its
    own, in one of `locations`."""
    kube = dict(kube or {})
    by_location: dict[int, list[GpuProfile]] = defaultdict(list)
    card_locations: dict[int, Location] = {}
    for card in cards.select_related("location").order_by("location__name", "profile_id"):
        by_location[card.location_id].append(card)
        card_locations[card.location_id] = card.location
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
            label = gpu_label_value(offer.gpu_type)
            seen = kube.pop((location_id, label), KubeGpus(0, 0))
            board.append(
                CapacityRow(
                    location=card_locations[location_id],
                    gpu_type=offer.gpu_type,
                    cards=offer.cards,
                    free=offer.free,
                    most_on_one_card=offer.most_on_one_card,
                    reserved=held[State.RESERVING] + held[State.RESERVED] + held[State.RELEASING],
                    attached=held[State.ATTACHED],
                    label=label,
                    kube_allocatable=seen.allocatable,
                    kube_requested=seen.requested,
                )
            )
    known = {location.pk: location for location in locations}
    for (location_id, label), seen in sorted(kube.items()):
        if location_id in known:
            board.append(
                CapacityRow(
                    location=known[location_id],
                    gpu_type=label,
                    cards=0, free=0, most_on_one_card=0, reserved=0, attached=0,
                    label=label,
                    kube_allocatable=seen.allocatable,
                    kube_requested=seen.requested,
                )
            )  # fmt: skip
    # Stable: each location's card types in their order, then what only Kubernetes knows.
    board.sort(key=lambda row: (row.location.name, row.location.pk, not row.cards))
    return board
