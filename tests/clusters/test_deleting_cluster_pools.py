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
