"""Setting up a cluster without leaving the page: the account's cloudspaces and images are
mirrored (at once for a new account, then every few minutes) and listed in the API, and the
new-cluster form offers them, with each location's GPU types and whether a pool fits."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from capvco_web.models import AuditEvent
from clusters.models import Account, Cloudspace, Cluster, ClusterSite, Image, MachinePool
from clusters.observe import account_catalog_observe
from clusters.whitesky import whitesky_client
from gpus.models import GpuProfile
from tests.gpus.conftest import BE, CLOUDSPACES, IMAGES, NL, Plane
from tests.whitesky_sim import WhiteskySimulator

pytestmark = pytest.mark.django_db
Tasks = Callable[[], AbstractContextManager[None]]


def catalog(plane: Plane) -> int:
    with whitesky_client(plane.account) as client:
        return account_catalog_observe(client=client, account=plane.account).writes


def test_cloudspaces_and_images_are_mirrored_per_location(plane: Plane) -> None:
    assert catalog(plane) > 0
    by_location = {
        location: set(
            Cloudspace.objects.filter(location__name=location).values_list(
                "cloudspace_id", flat=True
            )
        )
        for location in (NL, BE)
    }
    assert by_location == {NL: {CLOUDSPACES[NL]}, BE: {CLOUDSPACES[BE]}}
    assert IMAGES[NL] in set(
        Image.objects.filter(location__name=NL).values_list("image_id", flat=True)
    )
    assert catalog(plane) == 0  # a second pass over the same listing writes nothing


def test_a_failed_listing_keeps_what_was_mirrored(plane: Plane) -> None:
    catalog(plane)
    before = Cloudspace.objects.count(), Image.objects.count()
    plane.sim.fault(operation="listCloudspaces", status=503, times=10)
    plane.sim.fault(operation="listCustomerImages", status=503, times=10)
    with whitesky_client(plane.account) as client:
        result = account_catalog_observe(client=client, account=plane.account)
    assert result.errors and result.writes == 0
    assert (Cloudspace.objects.count(), Image.objects.count()) == before


def test_a_new_account_is_observed_at_once(
    whitesky_sim: WhiteskySimulator, admin_user: Any, run_tasks: Tasks
) -> None:
    api = APIClient()
    api.force_authenticate(admin_user)
    with run_tasks():
        response = api.post(
            "/api/v1/accounts/",
            {
                "name": "fresh",
                "api_url": whitesky_sim.api_url,
                "iam_url": whitesky_sim.iam_url,
                "customer_id": whitesky_sim.customer_id,
                "credential": whitesky_sim.token(),
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    account = Account.objects.get(name="fresh")
    assert set(account.locations.values_list("name", flat=True)) >= {NL, BE}
    assert GpuProfile.objects.filter(location__account=account).exists()  # locations observed
    assert Cloudspace.objects.filter(location__account=account).exists()  # and the catalog
    listed = api.get(f"/api/v1/cloudspaces/?location={account.locations.get(name=NL).pk}").json()[
        "results"
    ]
    assert [c["cloudspace_id"] for c in listed] == [CLOUDSPACES[NL]]
    images = api.get("/api/v1/images/", {"location__account": account.pk}).json()["results"]
    assert IMAGES[BE] in {i["image_id"] for i in images}


@pytest.fixture
def ready(plane: Plane) -> Plane:
    """Locations, cards and the catalog observed."""
    plane.observe()
    catalog(plane)
    return plane


def _form(plane: Plane, **extra: str) -> dict[str, str]:
    nl = plane.location(NL)
    data = {
        "account": str(plane.account.pk),
        "name": "fresh",
        f"site-{nl.pk}-use": "on",
        f"site-{nl.pk}-cloudspace": CLOUDSPACES[NL],
        f"site-{nl.pk}-image": str(IMAGES[NL]),
        "pool-0-name": "a100",
        "pool-0-location": str(nl.pk),
        "pool-0-replicas": "2",
        "pool-0-gpu_type": "NVIDIA A100",
        "pool-0-gpu_count": "1",
        "pool-0-vcpus": "4",
        "pool-0-memory_mib": "8192",
        "pool-0-disk_gib": "50",
    }
    return {**data, **extra}


def test_the_form_offers_the_observed_cloudspaces_images_and_gpu_types(
    admin_client: Client, ready: Plane
) -> None:
    html = admin_client.get(f"/clusters/new/?account={ready.account.pk}").content.decode()
    assert f'value="{CLOUDSPACES[NL]}"' in html and f'value="{IMAGES[BE]}"' in html
    assert 'value="NVIDIA A100"' in html and 'value="NVIDIA T4"' in html
    assert 'name="create"' in html


def test_a_check_says_whether_each_pool_fits(admin_client: Client, ready: Plane) -> None:
    free = sum(
        GpuProfile.objects.filter(location__name=NL, model__icontains="A100").values_list(
            "available_instances", flat=True
        )
    )
    fits = admin_client.post("/clusters/new/", {**_form(ready), "check": "1"})
    assert fits.status_code == 200
    assert "fits: all 2 machines" in fits.content.decode()
    too_many = admin_client.post(
        "/clusters/new/", {**_form(ready, **{"pool-0-replicas": str(free + 1)}), "check": "1"}
    )
    assert f"only {free} of {free + 1} machines fit now" in too_many.content.decode()
    nowhere = admin_client.post(
        "/clusters/new/", {**_form(ready, **{"pool-0-gpu_type": "NVIDIA T4"}), "check": "1"}
    )
    assert "not offered here; the location offers NVIDIA A100" in nowhere.content.decode()
    assert not Cluster.objects.exists()


def test_the_form_answers_htmx_with_itself(admin_client: Client, ready: Plane) -> None:
    response = admin_client.post(
        "/clusters/new/",
        {**_form(ready), "check": "1"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="cluster-form",
    )
    body = response.content.decode()
    assert "<html" not in body and body.lstrip().startswith("<form")
    assert "fits: all 2 machines" in body


def test_create_makes_the_cluster_its_sites_and_pools_audited(
    admin_client: Client, ready: Plane
) -> None:
    response = admin_client.post("/clusters/new/", {**_form(ready), "create": "1"})
    cluster = Cluster.objects.get(name="fresh")
    assert response.status_code == 302
    assert response["Location"] == f"/clusters/{cluster.pk}/"
    site = ClusterSite.objects.get(cluster=cluster)
    assert (site.location.name, site.cloudspace_id, site.image_id) == (
        NL, CLOUDSPACES[NL], IMAGES[NL],
    )  # fmt: skip
    pool = MachinePool.objects.get(cluster=cluster)
    assert (pool.name, pool.site, pool.replicas, pool.gpu_type, pool.gpu_count) == (
        "a100", site, 2, "NVIDIA A100", 1,
    )  # fmt: skip
    event = AuditEvent.objects.get(action="cluster.create")
    assert event.actor_name == "admin" and event.after is not None
    assert event.after["pools"] == [f"a100 in {NL}: 2 x 1 NVIDIA A100"]
    # The plan shows the machines the next reconcile makes.
    page = admin_client.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "Drift: the next reconcile takes 2 steps" in page


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"name": ""}, "Give the cluster a name."),
        ({"name": "Not A Label"}, "cluster: name: Use lowercase letters"),
        ({"site-{nl}-use": ""}, "Choose at least one location to run in"),
        ({"site-{nl}-image": ""}, "Choose the image in"),
        ({"pool-0-location": "{be}"}, f"pool a100: {BE} is not one of the cluster&#x27;s sites."),
        ({"pool-0-gpu_count": "9"}, "Ensure this value is less than or equal to 8."),
    ],
)
def test_create_refuses_what_is_wrong_saying_what_and_makes_nothing(
    admin_client: Client, ready: Plane, extra: dict[str, str], problem: str
) -> None:
    ids = {"nl": ready.location(NL).pk, "be": ready.location(BE).pk}
    changes = {key.format(**ids): value.format(**ids) for key, value in extra.items()}
    response = admin_client.post("/clusters/new/", {**_form(ready, **changes), "create": "1"})
    assert response.status_code == 400
    assert problem in response.content.decode()
    assert not Cluster.objects.exists() and not ClusterSite.objects.exists()
    assert not AuditEvent.objects.filter(action="cluster.create").exists()


def test_a_name_taken_by_another_cluster_is_refused(admin_client: Client, ready: Plane) -> None:
    ready.cluster("fresh", sites=(BE,))
    response = admin_client.post("/clusters/new/", {**_form(ready), "create": "1"})
    assert response.status_code == 400
    assert "cluster: name:" in response.content.decode()
    assert Cluster.objects.count() == 1


def test_a_user_without_a_role_may_not_set_up_a_cluster(
    logged_in_client: Client, ready: Plane
) -> None:
    assert logged_in_client.get("/clusters/new/").status_code == 403
    assert (
        logged_in_client.post("/clusters/new/", {**_form(ready), "create": "1"}).status_code == 403
    )
    assert not Cluster.objects.exists()
    assert b"/clusters/new/" not in logged_in_client.get("/clusters/").content


def test_an_account_added_in_the_admin_is_observed_at_once(
    whitesky_sim: WhiteskySimulator, admin_client: Client, run_tasks: Tasks
) -> None:
    with run_tasks():
        response = admin_client.post(
            "/admin/clusters/account/add/",
            {
                "name": "from-admin",
                "api_url": whitesky_sim.api_url,
                "iam_url": whitesky_sim.iam_url,
                "customer_id": whitesky_sim.customer_id,
                "new_credential": whitesky_sim.token(),
                "orphan_auto_release": "on",
                "orphan_grace_period": "01:00:00",
                "orphan_confirmations": "3",
            },
        )
    assert response.status_code == 302, response.content[:2000]
    account = Account.objects.get(name="from-admin")
    assert Cloudspace.objects.filter(location__account=account, location__name=NL).exists()
