"""`/metrics` in the Prometheus text format.

Gauges are read from the database at scrape time (a handful of grouped queries, whatever
the number of rows); counters from the store every process counts into
(`capvco_web.counters`).

Scrapes need `Authorization: Bearer <METRICS_TOKEN>` or a client address in
`METRICS_ALLOWED_IPS`; with neither set, nobody may scrape.
"""

from __future__ import annotations

import hmac
import logging
from collections import Counter
from collections.abc import Iterator

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from capvco_web.counters import counters
from clusters.models import Location, Machine
from gpus.models import HOURS_PER_MONTH, GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of

logger = logging.getLogger(__name__)


# --- what a scrape reads ----------------------------------------------------------------


class ControlPlaneCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from _gpu_instances()
        yield from _reservations()
        yield from _machines()
        yield from _observation_age()
        yield from _counters()


def _gpu_instances() -> Iterator[Metric]:
    State = VgpuReservation.State
    family = GaugeMetricFamily(
        "capvco_gpu_instances",
        "vGPU instances per location and GPU type: free (as whitesky lists them), "
        "reserved (billed, not attached), attached",
        labels=["location", "gpu_type", "state"],
    )
    type_of: dict[tuple[int, str], str] = {}
    figures: Counter[tuple[str, str, str]] = Counter()
    for card in GpuProfile.objects.select_related("location"):
        gpu_type = gpu_type_of(card)
        type_of[(card.location_id, card.profile_id)] = gpu_type
        figures[(card.location.name, gpu_type, "free")] += card.available_instances
    names = dict(Location.objects.values_list("pk", "name"))
    held = (
        VgpuReservation.objects.filter(state__in=[State.RESERVED, State.ATTACHED])
        .values("location_id", "gpu_id", "state")
        .annotate(n=Count("pk"))
    )
    for row in held:
        gpu_type = type_of.get((row["location_id"], row["gpu_id"]), "unknown")
        figures[(names.get(row["location_id"], "?"), gpu_type, row["state"])] += row["n"]
    for (location, gpu_type, state), value in sorted(figures.items()):
        family.add_metric([location, gpu_type, state], value)
    yield family


def _reservations() -> Iterator[Metric]:
    billed = VgpuReservation.objects.filter(
        state__in=[
            VgpuReservation.State.RESERVED,
            VgpuReservation.State.ATTACHED,
            VgpuReservation.State.RELEASING,
        ]
    )
    prices = {
        pk: (name, currency, price)
        for pk, name, currency, price in Location.objects.values_list(
            "pk", "name", "currency", "vgu_price"
        )
    }
    for kind, rows, what in (
        ("unassigned", billed.filter(vm_id__isnull=True), "billed and attached to no VM"),
        ("orphaned", billed.filter(orphaned_since__isnull=False), "billed and owned by nobody"),
    ):
        number = GaugeMetricFamily(
            f"capvco_reservations_{kind}", f"vGPU reservations {what}", labels=["location"]
        )
        cost = GaugeMetricFamily(
            f"capvco_reservations_{kind}_cost_per_hour",
            f"What the reservations {what} cost per hour, in the location's currency",
            labels=["location", "currency"],
        )
        per_location = dict(rows.values_list("location_id").annotate(n=Count("pk")))
        for location_id, (name, currency, price) in sorted(prices.items()):
            n = per_location.get(location_id, 0)
            number.add_metric([name], n)
            cost.add_metric([name, currency], float(n * price / HOURS_PER_MONTH))
        yield number
        yield cost


def _machines() -> Iterator[Metric]:
    family = GaugeMetricFamily("capvco_machines", "Machines per phase", labels=["phase"])
    per_phase = dict(Machine.objects.values_list("phase").annotate(n=Count("pk")))
    for phase in Machine.Phase.values:
        family.add_metric([phase], per_phase.get(phase, 0))
    yield family


def _observation_age() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "capvco_observation_age_seconds",
        "Seconds since the listings of the location's last complete observation began",
        labels=["location"],
    )
    now = timezone.now()
    rows = Location.objects.order_by("name").values_list("name", "last_complete_observation_at")
    for name, at in rows:
        family.add_metric([name], (now - at).total_seconds() if at else float("inf"))
    yield family


def _counters() -> Iterator[Metric]:
    for name, help_text, labels in (
        (
            "capvco_whitesky_calls",
            "whitesky API calls by operation and HTTP status (error: no answer)",
            ["operation", "status"],
        ),
        (
            "capvco_reconcile_steps",
            "Machine steps applied by the reconciler, by action and outcome",
            ["action", "outcome"],
        ),
        (
            "capvco_kube_writes",
            "Writes to workload clusters: node_labels (patched, error), gpu_addon "
            "(created, replaced, removed, error)",
            ["what", "outcome"],
        ),
    ):
        family = CounterMetricFamily(name, help_text, labels=labels)
        try:
            values = counters().read(name.removeprefix("capvco_"))
        except (redis.RedisError, OSError) as exc:
            logger.warning("metrics: %s unreadable: %s", name, exc)
            continue
        for label_values, value in sorted(values.items()):
            if len(label_values) == len(labels):
                family.add_metric(list(label_values), value)
        yield family


# --- the view -------------------------------------------------------------------------


def scrape_allowed(request: HttpRequest) -> bool:
    token: str = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    return request.META.get("REMOTE_ADDR", "") in settings.METRICS_ALLOWED_IPS


@login_not_required
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        response = HttpResponse("A metrics token or an allowed address is needed.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControlPlaneCollector())
    response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response
