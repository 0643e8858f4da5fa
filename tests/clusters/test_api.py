"""The REST API: validation names the field, secrets stay in, destructive calls need a reason,
a delete of what is still in use answers 409 saying what is in the way."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import ProtectedError
from rest_framework.test import APIClient

from capvco_web.api import exception_handler
from capvco_web.models import AuditEvent
from cloud.models import Account
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from gpus.models import GpuProfile
from tests.clusters.conftest import (
    ACCOUNT_IN_USE,
    POOL_IN_USE,
    SITE_IN_USE,
    deletes_audited,
    empty_pool,
    machines_left,
)

pytestmark = pytest.mark.django_db


def pool_body(site: ClusterSite, **gpu: Any) -> dict[str, Any]:
    return {"cluster": site.cluster_id, "site": site.pk, "name": "gpu", "replicas": 2, "gpu": gpu}


def test_pool_asks_for_gpus_by_type(api: APIClient, site: ClusterSite) -> None:
    GpuProfile.objects.create(
        location=site.location,
        profile_id="a1",
        vendor="NVIDIA",
        model="A100",
        available_instances=4,
    )
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
        "detail": "Invalid input: gpu.type: A pool with GPUs needs a GPU type (or a profile id).",
        "code": "invalid",
        "fields": {"gpu": {"type": ["A pool with GPUs needs a GPU type (or a profile id)."]}},
    }
    assert not MachinePool.objects.exists()


def test_pool_gpu_count_above_eight_is_refused(api: APIClient, site: ClusterSite) -> None:
    response = api.post("/api/v1/pools/", pool_body(site, type="T4", count=9), format="json")
    assert response.status_code == 400
    assert "count" in response.json()["fields"]["gpu"]


def test_pool_in_a_location_of_another_cluster_is_refused(
    api: APIClient, site: ClusterSite
) -> None:
    other = Cluster.objects.create(name="other", account=site.cluster.account)
    body = {**pool_body(site, type="T4", count=1), "cluster": other.pk}
    response = api.post("/api/v1/pools/", body, format="json")
    assert response.status_code == 409
    assert response.json()["fields"] == {
        "site": ["The site (location) does not belong to this cluster."]
    }


def test_updating_a_pool_validates_the_whole_pool(api: APIClient, site: ClusterSite) -> None:
    pool = MachinePool.objects.create(
        cluster=site.cluster, site=site, name="gpu", gpu_type="T4", gpu_count=1
    )
    response = api.patch(
        f"/api/v1/pools/{pool.pk}/", {"gpu": {"type": "", "count": 1}}, format="json"
    )
    assert response.status_code == 400
    pool.refresh_from_db()
    assert pool.gpu_type == "T4"


def test_cluster_delete_needs_a_reason_and_is_audited(api: APIClient, site: ClusterSite) -> None:
    url = f"/api/v1/clusters/{site.cluster_id}/"
    assert api.delete(url, {}, format="json").status_code == 400
    assert Cluster.objects.get().state == Cluster.State.ACTIVE

    response = api.delete(url, {"reason": "project ended", "confirm": "prod"}, format="json")

    assert response.status_code == 202
    assert Cluster.objects.get().state == Cluster.State.DELETING
    event = AuditEvent.objects.get(action="cluster.delete_requested")
    assert (event.actor_name, event.reason) == ("ops", "project ended")


def test_machine_force_delete_needs_a_reason_and_is_audited(
    api: APIClient, site: ClusterSite
) -> None:
    pool = MachinePool.objects.create(cluster=site.cluster, site=site, name="cpu")
    machine = Machine.objects.create(pool=pool, name="cpu-0", index=0, vm_id=7)
    url = f"/api/v1/machines/{machine.pk}/force-delete/"
    assert api.post(url, {"reason": "  "}, format="json").status_code == 400

    confirmed = {"reason": "VM lost", "confirm": "cpu-0"}
    assert api.post(url, confirmed, format="json").status_code == 204

    assert not Machine.objects.exists()
    event = AuditEvent.objects.get(action="machine.force_delete")
    assert event.before == {"name": "cpu-0", "pool": "cpu", "vm_id": 7, "phase": "pending"}


def test_cluster_delete_without_its_name_typed_is_refused_naming_confirm(
    api: APIClient, site: ClusterSite
) -> None:
    url = f"/api/v1/clusters/{site.cluster_id}/"
    reason_only = api.delete(url, {"reason": "project ended"}, format="json")
    assert reason_only.status_code == 400
    assert "confirm" in reason_only.json()["fields"]
    wrong = api.delete(url, {"reason": "project ended", "confirm": "demo"}, format="json")
    assert wrong.status_code == 409
    assert wrong.json()["fields"]["confirm"] == [
        "Type the cluster's name, prod, to confirm ('demo' was typed)."
    ]
    assert Cluster.objects.get().state == Cluster.State.ACTIVE
    assert not AuditEvent.objects.filter(action="cluster.delete_requested").exists()


def test_machine_force_delete_without_its_name_typed_is_refused_and_keeps_it(
    api: APIClient, site: ClusterSite
) -> None:
    pool = MachinePool.objects.create(cluster=site.cluster, site=site, name="cpu")
    machine = Machine.objects.create(pool=pool, name="cpu-0", index=0, vm_id=7)
    url = f"/api/v1/machines/{machine.pk}/force-delete/"
    assert api.post(url, {"reason": "VM lost"}, format="json").status_code == 400
    wrong = api.post(url, {"reason": "VM lost", "confirm": "cpu-1"}, format="json")
    assert wrong.status_code == 409
    assert wrong.json()["fields"]["confirm"] == [
        "Type the machine's name, cpu-0, to confirm ('cpu-1' was typed)."
    ]
    assert Machine.objects.filter(pk=machine.pk).exists()
    assert not AuditEvent.objects.filter(action="machine.force_delete").exists()


def test_api_pool_delete_with_machines_answers_409_and_keeps_them(
    api: APIClient, pool: MachinePool
) -> None:
    response = api.delete(f"/api/v1/pools/{pool.pk}/")

    assert response.status_code == 409
    assert response.json() == {"detail": POOL_IN_USE, "code": "in_use"}
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert deletes_audited() == []


def test_api_site_delete_with_machines_answers_409_and_keeps_them(
    api: APIClient, pool: MachinePool
) -> None:
    response = api.delete(f"/api/v1/sites/{pool.site_id}/")

    assert response.status_code == 409
    assert response.json() == {"detail": SITE_IN_USE, "code": "in_use"}
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert ClusterSite.objects.filter(pk=pool.site_id).exists()
    assert deletes_audited() == []


def test_api_account_delete_with_a_cluster_answers_409(api: APIClient, site: ClusterSite) -> None:
    response = api.delete(f"/api/v1/accounts/{site.cluster.account_id}/")

    assert response.status_code == 409
    assert response.json() == {"detail": ACCOUNT_IN_USE, "code": "in_use"}
    assert Account.objects.filter(name="acme").exists()


def test_api_empty_pool_and_site_delete_is_audited_as_the_user_with_the_reason(
    api: APIClient, site: ClusterSite
) -> None:
    pool = empty_pool(site)

    pool_deleted = api.delete(f"/api/v1/pools/{pool.pk}/", {"reason": "unused"}, format="json")
    site_deleted = api.delete(f"/api/v1/sites/{site.pk}/")

    assert (pool_deleted.status_code, site_deleted.status_code) == (204, 204)
    assert not ClusterSite.objects.exists()
    events = AuditEvent.objects.order_by("pk")
    assert [(e.action, e.actor_name, e.reason) for e in events] == [
        ("pool.delete", "ops", "unused"),
        ("site.delete", "ops", ""),
    ]


def test_a_protected_row_met_on_any_path_answers_409_naming_it(pool: MachinePool) -> None:
    # A delete that no service guards (or a race past the guard) meets the foreign key.
    with pytest.raises(ProtectedError) as met:
        pool.delete()

    response = exception_handler(met.value, {})

    assert response is not None
    assert response.status_code == 409
    assert response.data == {
        "detail": "Still in use by machine prod/gpu-0, machine prod/gpu-1: "
        "delete or tear down those first.",
        "code": "in_use",
    }


def test_api_documents_the_409_of_its_deletes(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()

    for path in ("/api/v1/pools/{id}/", "/api/v1/sites/{id}/", "/api/v1/accounts/{id}/"):
        assert "409" in schema["paths"][path]["delete"]["responses"], path


def test_openapi_schema_describes_the_api(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    for path in ("/api/v1/pools/", "/api/v1/reservations/{id}/release/", "/api/v1/gpu-types/"):
        assert path in schema["paths"]


def test_plan_shows_what_the_next_pass_would_do_without_doing_it(
    api: APIClient, site: ClusterSite
) -> None:
    pool = MachinePool.objects.create(
        cluster=site.cluster, site=site, name="gpu", replicas=2, next_index=6
    )
    Machine.objects.create(pool=pool, name="gpu-0", index=0, phase=Machine.Phase.RUNNING)
    Machine.objects.create(pool=pool, name="gpu-5", index=5, phase=Machine.Phase.FAILED)
    Machine.objects.create(pool=pool, name="gpu-4", index=4, phase=Machine.Phase.RUNNING)
    plan = f"/api/v1/clusters/{site.cluster_id}/plan/"

    pool.replicas = 4
    pool.save()
    response = api.get(plan)
    assert response.status_code == 200
    steps = [(s["action"], s["target"], s["machine_id"] is None) for s in response.json()]
    # The failed machine is provisioned again; the new one gets a fresh index, never one
    # an earlier machine had.
    assert steps == [("provision", "gpu-5", False), ("create", "gpu-6", True)]

    pool.replicas = 1
    pool.save()
    steps = [(s["action"], s["target"]) for s in api.get(plan).json()]
    # Scaling down takes machines that do not run first, then the newest.
    assert steps == [("teardown", "gpu-4"), ("teardown", "gpu-5")]
    assert Machine.objects.count() == 3
    assert not Machine.objects.filter(delete_requested=True).exists()  # a dry run


def test_a_machine_shows_the_spec_its_vm_was_made_with_and_how_its_pool_differs_now(
    api: APIClient, site: ClusterSite
) -> None:
    pool = MachinePool.objects.create(cluster=site.cluster, site=site, name="cpu", vcpus=4)
    made = Machine.objects.create(
        pool=pool, name="cpu-0", index=0, vm_id=7, spec=pool.machine_spec()
    )
    Machine.objects.create(pool=pool, name="cpu-1", index=1)  # no VM made yet
    MachinePool.objects.filter(pk=pool.pk).update(vcpus=8)

    rows = {m["name"]: m for m in api.get("/api/v1/machines/").json()["results"]}

    assert rows["cpu-0"]["spec"]["vcpus"] == 4 and rows["cpu-0"]["spec"]["gpu_count"] == 0
    assert rows["cpu-0"]["spec_changes"] == ["vcpus 4 -> 8"]
    assert (rows["cpu-1"]["spec"], rows["cpu-1"]["spec_changes"]) == (None, [])
    assert made.pk == rows["cpu-0"]["id"]
