"""The gauges and the attach time histogram of SR-IOV NICs on /metrics (capvco_web.metrics)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import redis
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from capvco_web.counters import SRIOV_ATTACH_BUCKETS, counters
from sriov.selectors import leaked_count, nic_state_counts, queue_lengths

logger = logging.getLogger(__name__)


def collect() -> Iterator[Metric]:
    yield from _sriov()
    yield from _sriov_attach_seconds()


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
