"""The autoscaler's gauges, as /metrics answers them: GPU-hours paid while no pod requested
them, summed in the database over every idle spell (one still open counts until now), and
the oldest waiting GPU pod's age."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from autoscale import metrics
from billing.models import IdleSpell
from tests.factories import KubePodFactory, LocationFactory

pytestmark = pytest.mark.django_db


def samples(name: str) -> list[tuple[dict[str, str], float]]:
    (family,) = [f for f in metrics.collect() if f.name == name]
    return [(s.labels, s.value) for s in family.samples]


def test_paid_idle_gpu_hours_add_up_every_spell_per_cluster() -> None:
    location = LocationFactory()
    now = timezone.now()
    for n, (gpus, hours, ended) in enumerate([(2, 3, True), (1, 1, False)]):
        IdleSpell.objects.create(
            account=location.account, location=location, cluster_id=1, cluster_name="ml",
            pool_id=1, machine_id=n, node_name=f"n{n}", currency="EUR", idle_gpus=gpus,
            hourly=Decimal(1), since=now - timedelta(hours=hours),
            ended_at=now if ended else None,
        )  # fmt: skip

    ((labels, value),) = samples("capvco_gpu_idle_paid_hours")

    assert labels == {"account": str(location.account_id), "cluster": "ml"}
    assert 7 <= value < 7.01  # 2 GPUs for 3 h, and 1 GPU for the hour so far


def test_the_oldest_waiting_gpu_pod_is_told_per_cluster() -> None:
    pod = KubePodFactory(node_name="", phase="Pending", gpu_requests=1)
    KubePod = type(pod)
    KubePod.objects.filter(pk=pod.pk).update(first_seen_at=timezone.now() - timedelta(minutes=5))

    ((labels, value),) = samples("capvco_gpu_pod_pending_oldest_seconds")

    assert labels["cluster"] == pod.cluster.name
    assert 300 <= value < 330
