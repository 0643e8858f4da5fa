"""`/metrics` in the Prometheus text format.

Gauges are read from the database at scrape time (a handful of grouped queries, whatever
the number of rows); counters from the store every process counts into
(`capvco_web.counters`).

Every per-location series carries `account` (the account's id: stable when the account is
renamed) beside `location`: two accounts may both have a location `nl-1`, and each is its
own series. `capvco_account_info{account, account_name}` names the ids.

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
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from capvco_web.counters import SRIOV_ATTACH_BUCKETS, counters
from cloud.models import Account, Location
from clusters.models import Machine
from gpus.models import HOURS_PER_MONTH, GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of
from sriov.selectors import leaked_count, nic_state_counts, queue_lengths

logger = logging.getLogger(__name__)


# --- what a scrape reads ----------------------------------------------------------------


class ControlPlaneCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from _accounts()
        yield from _gpu_instances()
        yield from _reservations()
        yield from _machines()
        yield from _observation_age()
        yield from _sriov()
        yield from _counters()
        yield from _sriov_attach_seconds()


def _accounts() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "capvco_account_info",
        "The name of each account whose id the per-location series carry as `account`",
        labels=["account", "account_name"],
    )
    for pk, name in Account.objects.order_by("pk").values_list("pk", "name"):
        family.add_metric([str(pk), name], 1)
    yield family


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
        ("orphaned", billed.filter(orphaned_since__isnull=False), "billed and owned by nobody"),
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
        labels=["account", "location"],
    )
    now = timezone.now()
    rows = Location.objects.order_by("account_id", "name").values_list(
        "account_id", "name", "last_complete_observation_at"
    )
    for account_id, name, at in rows:
        family.add_metric(
            [str(account_id), name], (now - at).total_seconds() if at else float("inf")
        )
    yield family


def _sriov() -> Iterator[Metric]:
    nics = GaugeMetricFamily("capvco_sriov_nics", "Pod NICs per state", labels=["state"])
    for state, n in nic_state_counts().items():
        nics.add_metric([state], n)
    yield nics
    queues = GaugeMetricFamily(
        "capvco_sriov_queue_length",
        "NIC requests waiting for their VM's turn (VMs with none are left out)",
        labels=["account", "location", "vm_id"],
    )
    lengths = queue_lengths()
    for (account_id, location, vm_id), n in sorted(lengths.items()):
        queues.add_metric([str(account_id), location, str(vm_id)], n)
    yield queues
    yield GaugeMetricFamily(
        "capvco_sriov_queued", "NIC requests waiting, over every VM", value=sum(lengths.values())
    )
    yield GaugeMetricFamily(
        "capvco_sriov_leaked_nics", "NICs on SR-IOV networks that no pod owns", value=leaked_count()
    )


def _sriov_attach_seconds() -> Iterator[Metric]:
    try:
        buckets = counters().read("sriov_attach_seconds_bucket")
        total_ms = sum(counters().read("sriov_attach_seconds_sum_ms").values())
    except (redis.RedisError, OSError) as exc:
        logger.warning("metrics: SR-IOV attach times unreadable: %s", exc)
        return
    by_bound = {label[0]: value for label, value in buckets.items() if label}
    family = HistogramMetricFamily(
        "capvco_sriov_attach_seconds",
        "Time from a NIC's turn on its VM to the attached NIC found",
        buckets=[(str(b), by_bound.get(str(b), 0)) for b in SRIOV_ATTACH_BUCKETS]
        + [("+Inf", by_bound.get("+Inf", 0))],
        sum_value=total_ms / 1000,
    )
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
            "capvco_sriov_nic_changes",
            "NIC attaches and detaches, by outcome (ok, refused by whitesky, error)",
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
