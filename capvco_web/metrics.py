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
from collections.abc import Callable, Iterator

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from capvco_web.counters import counters

logger = logging.getLogger(__name__)


# --- what a scrape reads ----------------------------------------------------------------


# What each app's gauges read at scrape time, in the order the apps registered them from
# their AppConfig.ready() (`metrics_register`).
_collectors: list[Callable[[], Iterator[Metric]]] = []


def metrics_register(collect: Callable[[], Iterator[Metric]]) -> None:
    if collect not in _collectors:
        _collectors.append(collect)


class ControlPlaneCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        for collect in _collectors:
            yield from collect()
        yield from _counters()


def _counters() -> Iterator[Metric]:
    for name, help_text, labels in (
        (
            "capvco_whitesky_calls",
            "whitesky API calls by account, operation and HTTP status (error: no answer)",
            # Counts kept before calls were counted per account have two labels: left out.
            ["account", "operation", "status"],
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
