"""The gauges of GPU cards and vGPU reservations on /metrics (capvco_web.metrics)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric

from cloud.models import Location
from gpus.models import HOURS_PER_MONTH, GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of


def collect() -> Iterator[Metric]:
    yield from _gpu_instances()
    yield from _reservations()


def _where() -> dict[int, tuple[str, str]]:
    """Each location's (account, location) labels, by its id."""
    rows = Location.objects.values_list("pk", "account_id", "name")
    return {pk: (str(account_id), name) for pk, account_id, name in rows}


def _gpu_instances() -> Iterator[Metric]:
    State = VgpuReservation.State
    family = GaugeMetricFamily(
        "capvco_gpu_instances",
        "vGPU instances per account, location and GPU type: free (as whitesky lists them), "
        "reserved (billed, not attached), attached",
        labels=["account", "location", "gpu_type", "state"],
    )
    where = _where()
    type_of: dict[tuple[int, str], str] = {}
    figures: Counter[tuple[int, str, str]] = Counter()
    for card in GpuProfile.objects.all():
        gpu_type = gpu_type_of(card)
        type_of[(card.location_id, card.profile_id)] = gpu_type
        figures[(card.location_id, gpu_type, "free")] += card.available_instances
    held = (
        VgpuReservation.objects.filter(state__in=[State.RESERVED, State.ATTACHED])
        .values("location_id", "gpu_id", "state")
        .annotate(n=Count("pk"))
    )
    for row in held:
        gpu_type = type_of.get((row["location_id"], row["gpu_id"]), "unknown")
        figures[(row["location_id"], gpu_type, row["state"])] += row["n"]
    labelled = {
        (*where[location_id], gpu_type, state): n
        for (location_id, gpu_type, state), n in figures.items()
        if location_id in where
    }
    for labels, value in sorted(labelled.items()):
        family.add_metric(list(labels), value)
    yield family


def _reservations() -> Iterator[Metric]:
    billed = VgpuReservation.objects.filter(
        state__in=[
            VgpuReservation.State.RESERVED,
            VgpuReservation.State.ATTACHED,
            VgpuReservation.State.RELEASING,
        ]
    )
    locations = sorted(
        Location.objects.values_list("pk", "account_id", "name", "currency", "vgu_price"),
        key=lambda row: (row[1], row[2]),
    )
    for kind, rows, what in (
        ("unassigned", billed.filter(vm_id__isnull=True), "billed and attached to no VM"),
        (
            "orphaned",
            billed.filter(listed__orphaned_since__isnull=False),
            "billed and owned by nobody",
        ),
    ):
        number = GaugeMetricFamily(
            f"capvco_reservations_{kind}",
            f"vGPU reservations {what}",
            labels=["account", "location"],
        )
        cost = GaugeMetricFamily(
            f"capvco_reservations_{kind}_cost_per_hour",
            f"What the reservations {what} cost per hour, in the location's currency",
            labels=["account", "location", "currency"],
        )
        per_location = dict(rows.values_list("location_id").annotate(n=Count("pk")))
        for location_id, account_id, name, currency, price in locations:
            n = per_location.get(location_id, 0)
            number.add_metric([str(account_id), name], n)
            cost.add_metric([str(account_id), name, currency], float(n * price / HOURS_PER_MONTH))
        yield number
        yield cost
