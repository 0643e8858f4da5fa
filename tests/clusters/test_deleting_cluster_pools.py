"""A pool of a cluster being deleted is torn down with it: scaling or editing it is refused
with 409 naming the cluster's state, from every entry point, and nothing is audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from clusters.models import Cluster, MachinePool
from clusters.services import IMPORT_ACTOR, cluster_delete, pool_scale, pool_update

pytestmark = pytest.mark.django_db
REFUSAL = "Cluster prod is being deleted (state deleting)"


@pytest.fixture
def deleting(pool: MachinePool) -> MachinePool:
    cluster_delete(cluster=pool.cluster, actor=SystemActor.RECONCILER, reason="gone")
    assert Cluster.objects.get(pk=pool.cluster_id).state == Cluster.State.DELETING
    return pool


def pool_unchanged(pool: MachinePool) -> None:
    stored = MachinePool.objects.get(pk=pool.pk)
    assert (stored.replicas, stored.vcpus) == (2, 4)
    assert not AuditEvent.objects.filter(action__startswith="pool.").exists()


def test_api_refuses_to_scale_a_pool_of_a_deleting_cluster(
    api: APIClient, deleting: MachinePool
) -> None:
    response = api.post(
        f"/api/v1/pools/{deleting.pk}/scale/", {"replicas": 5, "reason": "more"}, format="json"
    )

    assert response.status_code == 409, response.json()
    assert REFUSAL in response.json()["detail"]
    pool_unchanged(deleting)


def test_api_refuses_to_edit_a_pool_of_a_deleting_cluster(
    api: APIClient, deleting: MachinePool
) -> None:
    response = api.patch(f"/api/v1/pools/{deleting.pk}/", {"vcpus": 8}, format="json")

    assert response.status_code == 409, response.json()
    assert REFUSAL in str(response.json())
    pool_unchanged(deleting)


def test_admin_refuses_to_scale_or_edit_a_pool_of_a_deleting_cluster(
    admin_client: Client, deleting: MachinePool
) -> None:
    scaled = admin_client.post(
        reverse("admin:clusters_machinepool_changelist"),
        {
            "action": "scale_selected", ACTION_CHECKBOX_NAME: [deleting.pk],
            "confirm": "yes", "replicas": 5, "reason": "more",
        },
        follow=True,
    )  # fmt: skip
    assert scaled.status_code == 200
    assert REFUSAL in scaled.content.decode()
    pool_unchanged(deleting)


def test_dashboard_refuses_to_scale_a_pool_of_a_deleting_cluster(
    admin_client: Client, deleting: MachinePool
) -> None:
    response = admin_client.post(f"/pools/{deleting.pk}/scale/", {"replicas": 5, "reason": "more"})

    assert response.status_code == 409
    assert REFUSAL in response.content.decode()
    pool_unchanged(deleting)


@pytest.mark.parametrize("actor", ["a person", IMPORT_ACTOR])
def test_the_services_refuse_whoever_asks(
    deleting: MachinePool, actor: str, admin_user: Any
) -> None:
    who = admin_user if actor == "a person" else actor
    with pytest.raises(ValidationError) as scaled:
        pool_scale(pool=deleting, replicas=5, actor=who, reason="more")
    deleting.vcpus = 8
    with pytest.raises(ValidationError) as edited:
        pool_update(pool=deleting, actor=who)

    assert REFUSAL in str(scaled.value) and REFUSAL in str(edited.value)
    assert scaled.value.code == "conflict"
    pool_unchanged(deleting)


def test_api_refuses_a_new_pool_in_a_deleting_cluster(
    api: APIClient, deleting: MachinePool
) -> None:
    body = {"cluster": deleting.cluster_id, "site": deleting.site_id, "name": "more"}

    response = api.post("/api/v1/pools/", body, format="json")

    assert response.status_code == 409, response.json()
    assert REFUSAL in response.json()["detail"]
    assert MachinePool.objects.count() == 1
    pool_unchanged(deleting)


def admin_pool_form(pool: MachinePool, **changes: Any) -> dict[str, Any]:
    return {
        "cluster": pool.cluster_id, "site": pool.site_id, "name": pool.name,
        "replicas": pool.replicas, "vcpus": pool.vcpus, "memory_mib": pool.memory_mib,
        "disk_gib": pool.disk_gib, "user_data": "", "gpu_type": pool.gpu_type,
        "gpu_profile_id": "", "gpu_count": pool.gpu_count, "gpu_driver_version": "",
        **changes,
    }  # fmt: skip


def test_admin_refuses_to_edit_a_pool_of_a_deleting_cluster_on_its_page(
    admin_client: Client, deleting: MachinePool
) -> None:
    response = admin_client.post(
        reverse("admin:clusters_machinepool_change", args=[deleting.pk]),
        admin_pool_form(deleting, replicas=5, vcpus=8),
    )

    assert response.status_code == 200
    assert REFUSAL in response.content.decode()
    pool_unchanged(deleting)


def test_admin_refuses_a_new_pool_in_a_deleting_cluster(
    admin_client: Client, deleting: MachinePool
) -> None:
    response = admin_client.post(
        reverse("admin:clusters_machinepool_add"),
        admin_pool_form(deleting, name="more", gpu_type="", gpu_count=0),
    )

    assert response.status_code == 200
    assert REFUSAL in response.content.decode()
    assert MachinePool.objects.count() == 1
    pool_unchanged(deleting)


def test_admin_refuses_to_edit_a_pool_of_a_deleting_cluster_on_the_cluster_page(
    admin_client: Client, deleting: MachinePool
) -> None:
    cluster, site = deleting.cluster, deleting.site
    form = {
        "name": cluster.name, "account": cluster.account_id, "gpu_addon": "",
        "new_kubeconfig": "", "sites-TOTAL_FORMS": 1, "sites-INITIAL_FORMS": 1,
        "sites-0-id": site.pk, "sites-0-cluster": cluster.pk, "sites-0-location": site.location_id,
        "sites-0-cloudspace_id": site.cloudspace_id, "sites-0-image_id": site.image_id,
        "pools-TOTAL_FORMS": 1, "pools-INITIAL_FORMS": 1, "pools-0-id": deleting.pk,
        **{f"pools-0-{k}": v for k, v in admin_pool_form(deleting, replicas=5).items()},
    }  # fmt: skip

    response = admin_client.post(reverse("admin:clusters_cluster_change", args=[cluster.pk]), form)

    assert response.status_code == 200
    assert REFUSAL in response.content.decode()
    pool_unchanged(deleting)


def test_the_cluster_page_offers_no_scale_while_the_cluster_is_deleted(
    admin_client: Client, deleting: MachinePool
) -> None:
    page = admin_client.get(f"/clusters/{deleting.cluster_id}/").content.decode()

    assert f"/pools/{deleting.pk}/scale/" not in page
