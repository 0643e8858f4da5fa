"""A node's verifications do not pile up: those a newer one replaced are history, deleted
past GPU_VERIFY_HISTORY_DAYS with the rest (beat once a day, or the command); a node's
newest verdict stays however old."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from capvco_web.retention import history_prune
from clusters.models import MachinePool
from kube.models import GpuVerification

pytestmark = pytest.mark.django_db
Status = GpuVerification.Status


def verification(pool: MachinePool, node: str, n: int, days_ago: int) -> GpuVerification:
    at = timezone.now() - timedelta(days=days_ago)
    return GpuVerification.objects.create(
        cluster_id=pool.cluster_id, node_name=node, node_uid=f"{node}-uid-{n}",
        status=Status.VERIFIED, job_name=f"gpu-verify-{node}-{n}", started_at=at,
        finished_at=at,
    )  # fmt: skip


def test_only_verifications_a_newer_one_replaced_go_once_past_their_retention(
    pool: MachinePool,
) -> None:
    replaced = verification(pool, "gpu-0", 1, days_ago=200)
    verification(pool, "gpu-0", 2, days_ago=120)  # replaced too, and old: goes
    newest = verification(pool, "gpu-0", 3, days_ago=100)  # the node's verdict: stays
    recent_replaced = verification(pool, "gpu-1", 1, days_ago=10)
    alone = verification(pool, "gpu-2", 1, days_ago=300)  # the node's only one: stays
    verification(pool, "gpu-1", 2, days_ago=5)

    pruned = history_prune()

    assert pruned.deleted("gpu_verifications") == 2
    kept = set(GpuVerification.objects.values_list("pk", flat=True))
    assert replaced.pk not in kept
    assert {newest.pk, recent_replaced.pk, alone.pk} <= kept
    assert history_prune().deleted("gpu_verifications") == 0
