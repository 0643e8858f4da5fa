"""A pool whose GPUs can never fit where it runs (no card of its type there, or none that
holds its count in all) is refused at every entry point, naming what the location
offers; one that fits in principle, if not now, is accepted. A card's total is what its
last listing showed free plus what the account's reservations hold on it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from capvco_web.models import AuditEvent
from cloud.models import Location
from clusters.models import Cluster, ClusterSite, MachinePool
from clusters.services import PoolSpec, SiteSpec, cluster_setup, pool_create, pool_update
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import card_totals, location_fit_refusal

pytestmark = pytest.mark.django_db

OFFERS = "nl-1 offers NVIDIA A100 (up to 4 per card), NVIDIA L4 (up to 2)"
NOT_OFFERED = f"GPU type 'NVIDIA H100' is not offered in nl-1: {OFFERS}."
TOO_MANY = (
    "5 GPUs of type 'NVIDIA A100' on one machine can never fit in nl-1: a machine's GPUs "
    f"share one card, and {OFFERS}."
)


@pytest.fixture
def cards(site: ClusterSite) -> ClusterSite:
    """In nl-1: two A100 cards of 4 instances, 1 and 2 of them free now (the others held
    by reservations), and one L4 card of 2, all free."""
    location = site.location
    for card, model, free, held in [
        ("a100-1", "A100 0000:3b:00.0", 1, 3),
        ("a100-2", "A100 0000:3c:00.0", 2, 2),
        ("l4-1", "L4 0000:5e:00.0", 2, 0),
    ]:
        GpuProfile.objects.create(
            location=location, profile_id=card, vendor="NVIDIA", model=model,
            available_instances=free,
        )  # fmt: skip
        for n in range(held):
            VgpuReservation.objects.create(
                location=location, name=f"other-{card}-{n}", vgpu_id=f"v-{card}-{n}",
                gpu_id=card, state=VgpuReservation.State.RESERVED,
            )  # fmt: skip
    # Released: it holds nothing.
    VgpuReservation.objects.create(
        location=location, name="gone", vgpu_id="v-gone", gpu_id="l4-1",
        state=VgpuReservation.State.RELEASED,
    )  # fmt: skip
    return site


def body(site: ClusterSite, **gpu: Any) -> dict[str, Any]:
    return {"cluster": site.cluster_id, "site": site.pk, "name": "gpu", "replicas": 2, "gpu": gpu}


def nothing_made() -> None:
    assert not MachinePool.objects.exists()
    assert not AuditEvent.objects.filter(action="pool.create").exists()


def test_a_card_total_is_what_is_free_plus_what_is_held_on_it(cards: ClusterSite) -> None:
    found = card_totals(cards.location, list(GpuProfile.objects.all()))
    assert found == {"a100-1": 4, "a100-2": 4, "l4-1": 2}


# --- the API ----------------------------------------------------------------------------


def test_api_refuses_a_type_no_card_of_the_location_is(api: APIClient, cards: ClusterSite) -> None:
    response = api.post("/api/v1/pools/", body(cards, type="NVIDIA H100", count=1), format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == {"gpu": {"type": [NOT_OFFERED]}}
    nothing_made()


def test_api_refuses_more_gpus_than_any_card_holds_in_all(
    api: APIClient, cards: ClusterSite
) -> None:
    response = api.post("/api/v1/pools/", body(cards, type="NVIDIA A100", count=5), format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == {"gpu": {"count": [TOO_MANY]}}
    nothing_made()


def test_api_accepts_what_a_card_holds_in_all_though_none_has_it_free_now(
    api: APIClient, cards: ClusterSite
) -> None:
    response = api.post("/api/v1/pools/", body(cards, type="nvidia a100", count=4), format="json")

    assert response.status_code == 201, response.json()
    assert MachinePool.objects.get().gpu_count == 4


def test_api_refuses_a_profile_id_the_location_has_not(api: APIClient, cards: ClusterSite) -> None:
    response = api.post("/api/v1/pools/", body(cards, profileId="gone-1", count=1), format="json")

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "gpu": {"profileId": [f"No card 'gone-1' in nl-1: {OFFERS}."]}
    }


def test_api_refuses_an_edit_to_what_can_never_fit(api: APIClient, cards: ClusterSite) -> None:
    pool = MachinePool.objects.create(
        cluster=cards.cluster, site=cards, name="gpu", gpu_type="NVIDIA L4", gpu_count=1
    )
    response = api.patch(
        f"/api/v1/pools/{pool.pk}/", {"gpu": {"type": "NVIDIA L4", "count": 3}}, format="json"
    )

    assert response.status_code == 400, response.json()
    assert "3 GPUs of type 'NVIDIA L4' on one machine can never fit in nl-1" in str(
        response.json()["fields"]["gpu"]["count"]
    )
    assert MachinePool.objects.get().gpu_count == 1


def test_an_edit_of_something_else_does_not_judge_the_gpus_again(
    api: APIClient, cards: ClusterSite
) -> None:
    # Made before the rule, or before its cards were taken out of the location.
    pool = MachinePool.objects.create(
        cluster=cards.cluster, site=cards, name="gpu", gpu_type="NVIDIA H100", gpu_count=1
    )
    response = api.patch(f"/api/v1/pools/{pool.pk}/", {"vcpus": 8}, format="json")

    assert response.status_code == 200, response.json()


def test_a_location_never_observed_says_to_wait(api: APIClient, site: ClusterSite) -> None:
    response = api.post("/api/v1/pools/", body(site, type="NVIDIA A100", count=1), format="json")

    assert response.status_code == 409, response.json()
    assert "nl-1 has not been observed yet" in response.json()["detail"]
    nothing_made()


def test_a_location_observed_without_gpus_says_so(api: APIClient, site: ClusterSite) -> None:
    Location.objects.filter(pk=site.location_id).update(
        last_complete_observation_at="2026-01-01T00:00:00Z"
    )
    response = api.post("/api/v1/pools/", body(site, type="NVIDIA A100", count=1), format="json")

    assert response.status_code == 400
    assert response.json()["fields"]["gpu"]["type"] == [
        "GPU type 'NVIDIA A100' is not offered in nl-1: nl-1 offers no GPUs."
    ]


def test_a_pool_without_gpus_is_not_judged(api: APIClient, site: ClusterSite) -> None:
    response = api.post("/api/v1/pools/", body(site), format="json")
    assert response.status_code == 201, response.json()


# --- the services, whoever calls them -----------------------------------------------------


def test_the_services_refuse_it_to_every_caller(cards: ClusterSite, admin_user: Any) -> None:
    pool = MachinePool(
        cluster=cards.cluster, site=cards, name="gpu", gpu_type="NVIDIA H100", gpu_count=1
    )
    with pytest.raises(ValidationError) as created:
        pool_create(pool=pool, actor=admin_user)
    assert created.value.message_dict == {"gpu_type": [NOT_OFFERED]}

    fits = pool_create(
        pool=MachinePool(
            cluster=cards.cluster, site=cards, name="a100", gpu_type="NVIDIA A100", gpu_count=2
        ),
        actor=admin_user,
    )
    fits.gpu_count = 5
    with pytest.raises(ValidationError) as updated:
        pool_update(pool=fits, actor=admin_user)
    assert updated.value.message_dict == {"gpu_count": [TOO_MANY]}
    assert MachinePool.objects.get().gpu_count == 2


def test_cluster_setup_makes_nothing_when_one_pool_cannot_fit(
    cards: ClusterSite, admin_user: Any
) -> None:
    location = cards.location
    with pytest.raises(ValidationError) as refused:
        cluster_setup(
            name="fresh",
            account=location.account,
            sites=[SiteSpec(location, "cs-2", 1)],
            pools=[
                PoolSpec("l4", location, replicas=1, gpu_type="NVIDIA L4", gpu_count=1),
                PoolSpec("big", location, replicas=1, gpu_type="NVIDIA A100", gpu_count=5),
            ],
            actor=admin_user,
        )  # fmt: skip
    assert refused.value.message_dict == {"pool big": [f"gpu_count: {TOO_MANY}"]}
    assert not Cluster.objects.filter(name="fresh").exists()
    assert not MachinePool.objects.exists()


def test_location_fit_refusal_is_none_for_what_fits(cards: ClusterSite) -> None:
    assert location_fit_refusal(cards.location, count=2, gpu_type="L4") is None
    assert location_fit_refusal(cards.location, count=4, profile_id="a100-2") is None
    refusal = location_fit_refusal(cards.location, count=3, profile_id="l4-1")
    assert refusal is not None and refusal.field == "gpu_count"


# --- the admin ----------------------------------------------------------------------------


def admin_pool_form(site: ClusterSite, **fields: Any) -> dict[str, Any]:
    return {
        "cluster": site.cluster_id, "site": site.pk, "name": "gpu", "replicas": 1,
        "vcpus": 4, "memory_mib": 8192, "disk_gib": 50, "user_data": "",
        "gpu_type": "", "gpu_profile_id": "", "gpu_count": 0, "gpu_driver_version": "",
        **fields,
    }  # fmt: skip


def test_the_admin_refuses_it_on_the_pool_form(admin_client: Client, cards: ClusterSite) -> None:
    response = admin_client.post(
        reverse("admin:clusters_machinepool_add"),
        admin_pool_form(cards, gpu_type="NVIDIA A100", gpu_count=5),
    )

    assert response.status_code == 200
    assert TOO_MANY.replace("'", "&#x27;") in response.content.decode()
    nothing_made()


def test_the_admin_refuses_it_on_the_cluster_page(admin_client: Client, cards: ClusterSite) -> None:
    cluster = cards.cluster
    pool = admin_pool_form(cards, gpu_type="NVIDIA H100", gpu_count=1)
    form = {
        "name": cluster.name, "account": cluster.account_id, "gpu_addon": "",
        "new_kubeconfig": "", "sites-TOTAL_FORMS": 1, "sites-INITIAL_FORMS": 1,
        "sites-0-id": cards.pk, "sites-0-cluster": cluster.pk,
        "sites-0-location": cards.location_id, "sites-0-cloudspace_id": cards.cloudspace_id,
        "sites-0-image_id": cards.image_id, "pools-TOTAL_FORMS": 1, "pools-INITIAL_FORMS": 0,
        **{f"pools-0-{k}": v for k, v in pool.items()},
    }  # fmt: skip
    response = admin_client.post(reverse("admin:clusters_cluster_change", args=[cluster.pk]), form)

    assert response.status_code == 200
    assert NOT_OFFERED.replace("'", "&#x27;") in response.content.decode()
    nothing_made()
