"""The REST API: validation names the field, secrets stay in, destructive calls need a reason."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from capvco_web.models import AuditEvent
from clusters.models import Account, Cluster, ClusterSite, Machine, MachinePool
from tests.factories import (
    JWT,
    ClusterFactory,
    ClusterSiteFactory,
    MachineFactory,
    MachinePoolFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def api() -> APIClient:
    client = APIClient()
    client.force_authenticate(UserFactory(username="ops"))
    return client


@pytest.fixture
def site() -> ClusterSite:
    return ClusterSiteFactory()


def pool_body(site: ClusterSite, **gpu: Any) -> dict[str, Any]:
    return {"cluster": site.cluster_id, "site": site.pk, "name": "gpu", "replicas": 2, "gpu": gpu}


def test_pool_asks_for_gpus_by_type(api: APIClient, site: ClusterSite) -> None:
    response = api.post(
        "/api/v1/pools/", pool_body(site, type="NVIDIA A100", count=1), format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["gpu"] == {
        "type": "NVIDIA A100", "profileId": "", "count": 1, "driverVersion": ""
    }  # fmt: skip
    assert MachinePool.objects.get().gpu_type == "NVIDIA A100"


def test_pool_with_gpus_but_no_type_is_refused_naming_the_field(
    api: APIClient, site: ClusterSite
) -> None:
    response = api.post("/api/v1/pools/", pool_body(site, count=2), format="json")
    assert response.status_code == 400
    assert response.json() == {
        "gpu": {"type": ["A pool with GPUs needs a GPU type (or a profile id)."]}
    }
    assert not MachinePool.objects.exists()


def test_pool_gpu_count_above_eight_is_refused(api: APIClient, site: ClusterSite) -> None:
    response = api.post("/api/v1/pools/", pool_body(site, type="T4", count=9), format="json")
    assert response.status_code == 400
    assert "count" in response.json()["gpu"]


def test_pool_in_a_location_of_another_cluster_is_refused(
    api: APIClient, site: ClusterSite
) -> None:
    other = ClusterFactory(account=site.cluster.account)
    body = {**pool_body(site, type="T4", count=1), "cluster": other.pk}
    response = api.post("/api/v1/pools/", body, format="json")
    assert response.status_code == 400
    assert response.json() == {"site": ["The site (location) does not belong to this cluster."]}


def test_updating_a_pool_validates_the_whole_pool(api: APIClient, site: ClusterSite) -> None:
    pool = MachinePoolFactory(site=site, gpu_type="T4", gpu_count=1)
    response = api.patch(
        f"/api/v1/pools/{pool.pk}/", {"gpu": {"type": "", "count": 1}}, format="json"
    )
    assert response.status_code == 400
    pool.refresh_from_db()
    assert pool.gpu_type == "T4"


def test_account_credential_is_write_only_and_stored_encrypted(api: APIClient) -> None:
    response = api.post(
        "/api/v1/accounts/",
        {"name": "b", "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
         "customer_id": "c2", "credential": JWT},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    assert "credential" not in response.json()
    assert JWT not in api.get("/api/v1/accounts/").content.decode()
    with connection.cursor() as cursor:
        cursor.execute("SELECT credential FROM clusters_account WHERE name = 'b'")
        assert JWT not in cursor.fetchone()[0]
    assert Account.objects.get(name="b").credential == JWT


def test_cluster_delete_needs_a_reason_and_is_audited(api: APIClient, site: ClusterSite) -> None:
    url = f"/api/v1/clusters/{site.cluster_id}/"
    assert api.delete(url, {}, format="json").status_code == 400
    assert Cluster.objects.get().state == Cluster.State.ACTIVE

    response = api.delete(url, {"reason": "project ended"}, format="json")

    assert response.status_code == 202
    assert Cluster.objects.get().state == Cluster.State.DELETING
    event = AuditEvent.objects.get(action="cluster.delete_requested")
    assert (event.actor_name, event.reason) == ("ops", "project ended")


def test_machine_force_delete_needs_a_reason_and_is_audited(
    api: APIClient, site: ClusterSite
) -> None:
    machine = MachineFactory(pool__site=site, pool__name="cpu", index=0, vm_id=7)
    url = f"/api/v1/machines/{machine.pk}/force-delete/"
    assert api.post(url, {"reason": "  "}, format="json").status_code == 400

    assert api.post(url, {"reason": "VM lost"}, format="json").status_code == 204

    assert not Machine.objects.exists()
    event = AuditEvent.objects.get(action="machine.force_delete")
    assert event.before == {"name": "cpu-0", "pool": "cpu", "vm_id": 7, "phase": "pending"}


def test_pool_with_machines_cannot_be_deleted_around_their_teardown(
    api: APIClient, site: ClusterSite
) -> None:
    pool = MachinePoolFactory(site=site)
    MachineFactory(pool=pool)
    response = api.delete(f"/api/v1/pools/{pool.pk}/")
    assert response.status_code == 400
    assert MachinePool.objects.exists()


def test_openapi_schema_describes_the_api(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    for path in ("/api/v1/pools/", "/api/v1/reservations/{id}/release/", "/api/v1/gpu-types/"):
        assert path in schema["paths"]


def test_plan_shows_what_the_next_pass_would_do_without_doing_it(
    api: APIClient, site: ClusterSite
) -> None:
    pool = MachinePoolFactory(site=site, name="gpu", replicas=2)
    MachineFactory(pool=pool, index=0, phase=Machine.Phase.RUNNING)
    MachineFactory(pool=pool, index=5, phase=Machine.Phase.RUNNING)

    response = api.get(f"/api/v1/clusters/{site.cluster_id}/plan/")

    assert response.status_code == 200
    assert response.json() == [
        {"action": "create", "target": "gpu-1", "detail": "pool gpu"},
        {"action": "delete", "target": "gpu-5", "detail": "pool gpu scaled down"},
    ]
    assert Machine.objects.count() == 2
