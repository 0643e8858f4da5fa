"""The gauges of machines on /metrics (capvco_web.metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric

from clusters.models import Machine


def collect() -> Iterator[Metric]:
    yield from _machines()


def _machines() -> Iterator[Metric]:
    family = GaugeMetricFamily("capvco_machines", "Machines per phase", labels=["phase"])
    per_phase = dict(Machine.objects.values_list("phase").annotate(n=Count("pk")))
    for phase in Machine.Phase.values:
        family.add_metric([phase], per_phase.get(phase, 0))
    yield family
