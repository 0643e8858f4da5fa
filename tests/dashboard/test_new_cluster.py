"""Setting up a cluster without leaving the page: the new-cluster form offers the account's
mirrored cloudspaces and images (tests/gpus/test_catalog.py), each location's GPU types and
whether a pool fits, and creates through `cluster_setup`, which checks the role itself."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from capvco_web.models import AuditEvent
from clusters.models import Cluster, ClusterSite, MachinePool
from clusters.services import PoolSpec, SiteSpec, cluster_setup
from clusters.tasks import observe_catalog
from gpus.models import GpuProfile
from tests.factories import AccountFactory, MembershipFactory
from tests.gpus.conftest import BE, CLOUDSPACES, IMAGES, NL, Plane

pytestmark = pytest.mark.django_db
Tasks = Callable[[], AbstractContextManager[None]]


@pytest.fixture
def ready(plane: Plane) -> Plane:
    """Locations, cards and the catalog observed."""
    plane.observe()
    observe_catalog(plane.account.pk)
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
    assert (
        f"never fits: GPU type &#x27;NVIDIA T4&#x27; is not offered in {NL}: {NL} offers "
        "NVIDIA A100 (up to 4 per card), NVIDIA L40S (up to 4)."
    ) in nowhere.content.decode()
    assert not Cluster.objects.exists()


def gpu_type_options(html: str, row: int = 0) -> list[str]:
    select = html.split(f'name="pool-{row}-gpu_type"', 1)[1].split("</select>", 1)[0]
    return re.findall(r'<option value="([^"]*)"', select)


def test_each_pool_is_offered_the_gpu_types_of_its_own_location(
    admin_client: Client, ready: Plane
) -> None:
    be = ready.location(BE)
    first = admin_client.get(f"/clusters/new/?account={ready.account.pk}").content.decode()
    in_be = admin_client.post(
        "/clusters/new/", {**_form(ready, **{"pool-0-location": str(be.pk)}), "check": "1"}
    ).content.decode()
    in_nl = admin_client.post("/clusters/new/", {**_form(ready), "check": "1"}).content.decode()

    assert gpu_type_options(first) == ["", "NVIDIA A100", "NVIDIA T4"]  # BE comes first
    assert gpu_type_options(in_be) == ["", "NVIDIA A100", "NVIDIA T4"]
    # In NL the A100 asked for is offered; the T4 is not, the L40S is.
    assert gpu_type_options(in_nl) == ["", "NVIDIA A100", "NVIDIA L40S"]
    kept = admin_client.post(
        "/clusters/new/", {**_form(ready, **{"pool-0-gpu_type": "NVIDIA T4"}), "check": "1"}
    ).content.decode()
    assert gpu_type_options(kept) == ["", "NVIDIA A100", "NVIDIA L40S", "NVIDIA T4"]
    assert "NVIDIA T4 (not offered here)" in kept


def test_create_refuses_more_gpus_than_a_card_there_holds_and_makes_nothing(
    admin_client: Client, ready: Plane
) -> None:
    response = admin_client.post(
        "/clusters/new/", {**_form(ready, **{"pool-0-gpu_count": "5"}), "create": "1"}
    )

    assert response.status_code == 400
    assert (
        "pool a100: gpu_count: 5 GPUs of type &#x27;NVIDIA A100&#x27; on one machine can "
        f"never fit in {NL}: a machine&#x27;s GPUs share one card, and {NL} offers NVIDIA "
        "A100 (up to 4 per card), NVIDIA L40S (up to 4)."
    ) in response.content.decode()
    assert not Cluster.objects.exists() and not MachinePool.objects.exists()


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


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_a_role_that_may_not_add_clusters_is_refused_and_nothing_is_made(
    client: Client, ready: Plane, role: str
) -> None:
    member = MembershipFactory(account=ready.account, role=role).user
    client.force_login(member)
    assert client.get("/clusters/new/").status_code == 403
    assert client.post("/clusters/new/", {**_form(ready), "create": "1"}).status_code == 403
    assert b"/clusters/new/" not in client.get("/clusters/").content
    assert not Cluster.objects.exists()


def test_an_admin_of_the_account_sets_up_a_cluster_there_and_only_there(
    client: Client, ready: Plane
) -> None:
    other = AccountFactory(name="elsewhere")
    member = MembershipFactory(account=ready.account, role="admin").user
    MembershipFactory(user=member, account=other, role="operator")
    client.force_login(member)

    form = client.get("/clusters/new/").context["head"]
    assert list(form.fields["account"].queryset) == [ready.account]
    elsewhere = client.post(
        "/clusters/new/", {**_form(ready), "account": str(other.pk), "create": "1"}
    )
    assert elsewhere.status_code == 400 and not Cluster.objects.exists()

    response = client.post("/clusters/new/", {**_form(ready), "create": "1"})
    assert response.status_code == 302
    cluster = Cluster.objects.get(name="fresh", account=ready.account)
    events = AuditEvent.objects.filter(account=ready.account, actor=member)
    assert sorted(events.values_list("action", flat=True)) == [
        "cluster.create", "pool.create", "site.create",
    ]  # fmt: skip
    assert events.get(action="cluster.create").object_id == str(cluster.pk)


def test_the_service_itself_refuses_a_role_that_may_not_add_clusters(ready: Plane) -> None:
    """Whatever calls cluster_setup (the dashboard, a command, a future endpoint)."""
    operator = MembershipFactory(account=ready.account, role="operator").user
    nl = ready.location(NL)
    with pytest.raises(PermissionDenied):
        cluster_setup(
            name="fresh",
            account=ready.account,
            sites=[SiteSpec(nl, CLOUDSPACES[NL], IMAGES[NL])],
            pools=[PoolSpec(name="a100", location=nl, replicas=1)],
            actor=operator,
        )
    assert not Cluster.objects.exists() and not ClusterSite.objects.exists()
    assert not AuditEvent.objects.exists()
