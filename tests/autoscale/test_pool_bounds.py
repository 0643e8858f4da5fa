"""People own a pool's bounds; with autoscale on its replicas are the autoscaler's: a
person's scale is refused at every entry point (API, dashboard), naming the bounds, and
turning autoscale off keeps the machines the autoscaler decided."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from autoscale.models import GpuShortfall
from clusters.models import ClusterSite, MachinePool, PoolTarget
from gpus.models import GpuProfile

pytestmark = pytest.mark.django_db


@pytest.fixture
def autoscaled(site: ClusterSite) -> MachinePool:
    GpuProfile.objects.create(
        location=site.location, profile_id="a1", vendor="NVIDIA", model="A100",
        available_instances=4,
    )  # fmt: skip
    pool = MachinePool.objects.create(
        cluster=site.cluster, site=site, name="gpu", replicas=1, gpu_type="NVIDIA A100",
        gpu_count=1, autoscale_enabled=True, autoscale_min=0, autoscale_max=4,
    )  # fmt: skip
    PoolTarget.objects.create(pool=pool, replicas=3, reason="pods", decided_at=timezone.now())
    return pool


def test_the_api_shows_the_bounds_and_the_autoscalers_decision(
    api: APIClient, autoscaled: MachinePool
) -> None:
    shown = api.get(f"/api/v1/pools/{autoscaled.pk}/").json()

    assert shown["replicas"] == 1
    assert {k: shown["autoscale"][k] for k in ("enabled", "min", "max", "replicas", "reason")} == {
        "enabled": True, "min": 0, "max": 4, "replicas": 3, "reason": "pods"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body"),
    [("", {"replicas": 5}), ("scale/", {"replicas": 5, "reason": "more"})],
    ids=["patch", "scale"],
)
def test_a_persons_scale_of_an_autoscaled_pool_is_refused_naming_its_bounds(
    api: APIClient, autoscaled: MachinePool, path: str, body: dict[str, Any]
) -> None:
    method = api.patch if not path else api.post
    response = method(f"/api/v1/pools/{autoscaled.pk}/{path}", body, format="json")

    assert response.status_code == 400, response.json()
    assert "autoscales between 0 and 4 machines (now 3)" in response.json()["detail"]
    assert MachinePool.objects.get(pk=autoscaled.pk).replicas == 1


def test_the_dashboards_scale_is_refused_too(admin_client: Any, autoscaled: MachinePool) -> None:
    response = admin_client.post(
        f"/pools/{autoscaled.pk}/scale/", {"replicas": 5, "reason": "more"}
    )

    assert "autoscales between 0 and 4" in response.content.decode()
    assert MachinePool.objects.get(pk=autoscaled.pk).replicas == 1


def test_turning_autoscale_off_keeps_the_machines_it_decided(
    api: APIClient, autoscaled: MachinePool
) -> None:
    response = api.patch(
        f"/api/v1/pools/{autoscaled.pk}/", {"autoscale": {"enabled": False}}, format="json"
    )

    assert response.status_code == 200, response.json()
    pool = MachinePool.objects.get(pk=autoscaled.pk)
    assert (pool.autoscale_enabled, pool.replicas, pool.effective_replicas) == (False, 3, 3)


@pytest.mark.parametrize(
    ("autoscale", "said"),
    [
        ({"enabled": True, "min": 3, "max": 2}, "min (3) is above its max (2)"),
        ({"enabled": True, "min": 0, "max": 0}, "Give an autoscale max from 1"),
    ],
)
def test_bounds_that_cannot_be_are_refused_naming_the_field(
    api: APIClient, autoscaled: MachinePool, autoscale: dict[str, Any], said: str
) -> None:
    response = api.patch(f"/api/v1/pools/{autoscaled.pk}/", {"autoscale": autoscale}, format="json")

    assert response.status_code == 400
    assert said in response.json()["detail"]
    assert "autoscale" in response.json()["fields"]


def test_a_pool_without_gpus_cannot_autoscale(api: APIClient, site: ClusterSite) -> None:
    body = {
        "cluster": site.cluster_id, "site": site.pk, "name": "cpu", "replicas": 1,
        "autoscale": {"enabled": True, "min": 0, "max": 3},
    }  # fmt: skip
    response = api.post("/api/v1/pools/", body, format="json")

    assert response.status_code == 400
    assert "only a pool with GPUs can autoscale" in response.json()["detail"]


def test_the_cluster_page_shows_the_decision_and_a_shortfall_and_offers_no_scale(
    admin_client: Any, autoscaled: MachinePool
) -> None:
    now = timezone.now()
    GpuShortfall.objects.create(
        cluster=autoscaled.cluster, gpu_type="nvidia-a100", gpus=2, pods=3, since=now,
        text="nvidia-a100 x 2: 3 pods pending: nl 0 free", oldest_pod_since=now, updated_at=now,
    )  # fmt: skip

    page = admin_client.get(reverse("dashboard:cluster", args=[autoscaled.cluster_id]))

    body = page.content.decode()
    assert "autoscaled 0 to 4" in body
    assert "gpu: pods (" in body  # the autoscaler's reason, with when
    assert "No capacity: nvidia-a100 x 2: 3 pods pending: nl 0 free" in body
    assert reverse("dashboard:pool-scale", args=[autoscaled.pk]) not in body


def test_the_cluster_pages_history_tells_each_change_of_its_pools_with_before_and_after(
    api: APIClient, admin_client: Any, autoscaled: MachinePool
) -> None:
    changed = api.patch(
        f"/api/v1/pools/{autoscaled.pk}/",
        {"autoscale": {"enabled": True, "min": 1, "max": 6}},
        format="json",
    )
    assert changed.status_code == 200, changed.json()

    page = admin_client.get(reverse("dashboard:cluster", args=[autoscaled.cluster_id]))

    history = page.content.decode().split('id="history"')[1].split("</section>")[0]
    assert "pool.update" in history
    assert "autoscale_max: 4 → 6" in history
    assert "autoscale_min: 0 → 1" in history
