"""Cluster and pool names that could make one owner's VM names read as another's are
refused by the model, hence by the API and the admin; names cannot change once made."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from cloud.models import Account, Location, Membership
from clusters.models import Cluster, ClusterSite, MachinePool
from gpus.models import VgpuReservation

pytestmark = pytest.mark.django_db
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhcGkifQ.c2lnbmF0dXJl"
X_Y_AFTER_X = (
    "Cluster 'x' exists: VM names of cluster 'x-y' (capvco-x-y-...) "
    "could be read as names of cluster 'x'."
)
X_AFTER_X_Y = (
    "Cluster 'x-y' exists: VM names of cluster 'x-y' (capvco-x-y-...) "
    "could be read as names of cluster 'x'."
)


@pytest.fixture
def account() -> Account:
    return Account.objects.create(
        name="acme", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c1", credential=JWT,
    )  # fmt: skip


def cluster_made(account: Account, name: str, *pools: str) -> Cluster:
    cluster = Cluster.objects.create(name=name, account=account)
    location, _ = Location.objects.get_or_create(account=account, name="nl-1")
    site = ClusterSite.objects.create(
        cluster=cluster, location=location, cloudspace_id=f"cs-{name}", image_id=1
    )
    for pool in pools:
        MachinePool.objects.create(cluster=cluster, site=site, name=pool)
    return cluster


def name_errors(instance: Cluster | MachinePool) -> list[str]:
    with pytest.raises(ValidationError) as refused:
        instance.full_clean()
    return refused.value.message_dict["name"]


# --- the model ---------------------------------------------------------------------------


def test_cluster_whose_name_extends_another_by_a_dash_is_refused(account: Account) -> None:
    cluster_made(account, "x", "y-z")

    assert name_errors(Cluster(name="x-y", account=account)) == [X_Y_AFTER_X]


def test_cluster_whose_name_another_extends_by_a_dash_is_refused(account: Account) -> None:
    cluster_made(account, "x-y", "z")

    assert name_errors(Cluster(name="x", account=account)) == [X_AFTER_X_Y]


def same_customer_account(account: Account, name: str = "globex") -> Account:
    """Another account of ours naming the same whitesky customer: its customer id (in
    other letters), reached through another API host name."""
    return Account.objects.create(
        name=name, api_url="https://vco-alias.example/api/1", iam_url="https://iam.example",
        customer_id=account.customer_id.upper(), credential=JWT,
    )  # fmt: skip


def test_cluster_names_overlap_among_accounts_of_one_whitesky_customer(account: Account) -> None:
    cluster_made(same_customer_account(account), "x")

    for name in ("x", "x-y"):
        [refusal] = name_errors(Cluster(name=name, account=account))
        # Not which cluster, not which account, not that one exists.
        assert refusal == (
            f"Cluster name '{name}' is not available at this whitesky customer: its VM and "
            f"vGPU names (capvco-{name}-...) must read as one cluster's only. Choose another "
            "name."
        )
        assert "'x'" not in refusal.replace(f"'{name}'", "") and "globex" not in refusal


def test_cluster_names_are_free_across_whitesky_customers(account: Account) -> None:
    for other_customer in (
        {"api_url": "https://vco.example/api/1", "customer_id": "c2"},
        {"api_url": "https://vco2.example/api/1", "customer_id": "c3"},
    ):
        other = Account.objects.create(
            name=other_customer["api_url"] + other_customer["customer_id"],
            iam_url="https://iam.example", credential=JWT, **other_customer,
        )  # fmt: skip
        cluster_made(other, "x", "gpu")
    Cluster(name="x-y", account=account).full_clean()

    cluster_made(account, "x", "gpu")

    assert Cluster.objects.filter(name="x").count() == 3


def test_the_database_holds_one_name_per_account(account: Account) -> None:
    other = Account.objects.create(
        name="other", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c2", credential=JWT,
    )  # fmt: skip
    Cluster.objects.bulk_create([Cluster(name="x", account=account)])  # no save(): no check
    Cluster.objects.bulk_create([Cluster(name="x", account=other)])
    with pytest.raises(IntegrityError), transaction.atomic():
        Cluster.objects.bulk_create([Cluster(name="x", account=account)])


def test_an_account_cannot_move_its_clusters_to_a_customer_where_their_names_are_taken(
    api: APIClient, account: Account
) -> None:
    cluster_made(account, "x")
    elsewhere = Account.objects.create(
        name="elsewhere", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c2", credential=JWT,
    )  # fmt: skip
    cluster_made(elsewhere, "x-y")

    moved = api.patch(f"/api/v1/accounts/{account.pk}/", {"customer_id": "C2"}, format="json")

    assert moved.status_code == 409, moved.json()
    [refusal] = moved.json()["fields"]["customer_id"]
    assert "Cluster name 'x' is not available at this whitesky customer" in refusal
    assert "x-y" not in refusal and "elsewhere" not in refusal
    assert Account.objects.get(pk=account.pk).customer_id == "c1"
    assert (
        api.patch(
            f"/api/v1/accounts/{account.pk}/", {"customer_id": "c3"}, format="json"
        ).status_code
        == 200
    )


def test_api_conflict_with_a_cluster_the_caller_cannot_see_names_nothing_of_it(
    account: Account, django_user_model: Any
) -> None:
    other = same_customer_account(account, name="secret-other-account")
    cluster_made(other, "hidden")
    admin = django_user_model.objects.create_user("acme-admin")
    Membership.objects.create(user=admin, account=account, role=Group.objects.get(name="admin"))
    client = APIClient()
    client.force_authenticate(admin)

    taken = client.post(
        "/api/v1/clusters/", {"name": "hidden", "account": account.pk}, format="json"
    )
    free = client.post("/api/v1/clusters/", {"name": "shown", "account": account.pk}, format="json")

    assert taken.status_code == 409, taken.json()
    text = str(taken.json())
    assert "exists" not in text and "secret-other-account" not in text
    assert "not available at this whitesky customer" in text
    assert free.status_code == 201, free.json()


def test_a_deleting_cluster_still_holds_its_name_prefix(account: Account) -> None:
    cluster = cluster_made(account, "x")
    Cluster.objects.filter(pk=cluster.pk).update(state=Cluster.State.DELETING)

    assert name_errors(Cluster(name="x-y", account=account)) == [X_Y_AFTER_X]


def test_clusters_whose_names_only_share_letters_are_valid(account: Account) -> None:
    cluster_made(account, "x", "a")
    for name in ("xy", "y-x", "x1"):
        Cluster(name=name, account=account).full_clean()


def test_a_valid_cluster_does_not_conflict_with_itself(account: Account) -> None:
    cluster = cluster_made(account, "x-y")
    cluster.full_clean()


def test_pool_whose_name_extends_another_of_its_cluster_is_refused(account: Account) -> None:
    cluster = cluster_made(account, "c", "gpu")
    pool = MachinePool(cluster=cluster, site=cluster.sites.get(), name="gpu-a100")

    assert name_errors(pool) == [
        "Pool 'gpu' exists in cluster 'c': VM names of pool 'gpu-a100' "
        "(capvco-c-gpu-a100-...) could be read as names of pool 'gpu'."
    ]


def test_pool_whose_name_another_of_its_cluster_extends_is_refused(account: Account) -> None:
    cluster = cluster_made(account, "c", "a-1")

    assert name_errors(MachinePool(cluster=cluster, site=cluster.sites.get(), name="a")) == [
        "Pool 'a-1' exists in cluster 'c': VM names of pool 'a-1' (capvco-c-a-1-...) "
        "could be read as names of pool 'a'."
    ]


def test_pool_names_may_overlap_across_clusters(account: Account) -> None:
    cluster_made(account, "c", "gpu")
    other = cluster_made(account, "d")

    MachinePool(cluster=other, site=other.sites.get(), name="gpu-a100").full_clean()


def test_a_cluster_cannot_be_renamed(account: Account) -> None:
    cluster = cluster_made(account, "x")
    cluster.name = "w"

    assert name_errors(cluster) == [
        "A cluster's name cannot change: its VM and vGPU names carry it."
    ]


def test_a_pool_cannot_be_renamed(account: Account) -> None:
    pool = cluster_made(account, "c", "gpu").pools.get()
    pool.name = "cpu"

    assert name_errors(pool) == ["A pool's name cannot change: its VM and vGPU names carry it."]


# --- the REST API ------------------------------------------------------------------------


def test_api_refuses_a_cluster_whose_vm_names_could_be_read_as_anothers(
    api: APIClient, account: Account
) -> None:
    cluster_made(account, "x", "y-z")

    response = api.post("/api/v1/clusters/", {"name": "x-y", "account": account.pk})

    assert response.status_code == 409
    assert response.json()["fields"] == {"name": [X_Y_AFTER_X]}
    assert list(Cluster.objects.values_list("name", flat=True)) == ["x"]


def test_api_refuses_a_pool_whose_vm_names_could_be_read_as_anothers(
    api: APIClient, account: Account
) -> None:
    cluster = cluster_made(account, "c", "gpu")
    body = {"cluster": cluster.pk, "site": cluster.sites.get().pk, "name": "gpu-a100"}

    response = api.post("/api/v1/pools/", body, format="json")

    assert response.status_code == 409
    assert list(response.json()["fields"]) == ["name"]
    assert "Pool 'gpu' exists in cluster 'c'" in response.json()["fields"]["name"][0]
    assert list(MachinePool.objects.values_list("name", flat=True)) == ["gpu"]


def test_api_refuses_renaming_a_pool(api: APIClient, account: Account) -> None:
    pool = cluster_made(account, "c", "gpu").pools.get()

    response = api.patch(f"/api/v1/pools/{pool.pk}/", {"name": "cpu"}, format="json")

    assert response.status_code == 409
    assert response.json()["fields"] == {
        "name": ["A pool's name cannot change: its VM and vGPU names carry it."]
    }


# --- the admin ---------------------------------------------------------------------------


def inline_forms(prefix: str, *forms: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        f"{prefix}-TOTAL_FORMS": len(forms),
        f"{prefix}-INITIAL_FORMS": 0,
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
    }
    for n, form in enumerate(forms):
        data.update({f"{prefix}-{n}-{field}": value for field, value in form.items()})
    return data


POOL_FIELDS = {
    "replicas": 1, "vcpus": 4, "memory_mib": 8192, "disk_gib": 50, "gpu_count": 0,
    "autoscale_min": 0, "autoscale_max": 0,
}  # fmt: skip


def test_admin_add_cluster_refuses_a_name_that_extends_another(
    admin_client: Client, account: Account
) -> None:
    cluster_made(account, "x", "y-z")

    response = admin_client.post(
        reverse("admin:clusters_cluster_add"),
        {"name": "x-y", "account": account.pk, **inline_forms("sites"), **inline_forms("pools")},
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [X_Y_AFTER_X]}
    assert list(Cluster.objects.values_list("name", flat=True)) == ["x"]


def test_admin_add_pool_refuses_a_name_that_extends_another(
    admin_client: Client, account: Account
) -> None:
    cluster = cluster_made(account, "c", "gpu")

    response = admin_client.post(
        reverse("admin:clusters_machinepool_add"),
        {"cluster": cluster.pk, "site": cluster.sites.get().pk, "name": "gpu-a", **POOL_FIELDS},
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["name"]
    assert "Pool 'gpu' exists in cluster 'c'" in errors["name"][0]
    assert MachinePool.objects.count() == 1


def test_admin_refuses_two_new_pools_of_one_cluster_that_overlap(
    admin_client: Client, account: Account
) -> None:
    cluster = cluster_made(account, "c")
    site = cluster.sites.get()
    sites = inline_forms(
        "sites",
        {"id": site.pk, "cluster": cluster.pk, "location": site.location_id,
         "cloudspace_id": site.cloudspace_id, "image_id": site.image_id},
    )  # fmt: skip
    sites["sites-INITIAL_FORMS"] = 1
    pools = inline_forms(
        "pools",
        {"name": "a-b", "site": site.pk, **POOL_FIELDS},
        {"name": "a", "site": site.pk, **POOL_FIELDS},
    )

    response = admin_client.post(
        reverse("admin:clusters_cluster_change", args=[cluster.pk]), {**sites, **pools}
    )

    assert response.status_code == 200
    (formset,) = [
        f.formset for f in response.context["inline_admin_formsets"] if f.formset.prefix == "pools"
    ]
    assert formset.errors == [
        {},
        {
            "name": [
                "Pool 'a-b' exists in cluster 'c': VM names of pool 'a-b' (capvco-c-a-b-...) "
                "could be read as names of pool 'a'."
            ]
        },
    ]
    assert not MachinePool.objects.exists()


# --- creates at the same time ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_creates_at_once_of_x_and_x_y_cannot_both_pass(account: Account) -> None:
    """Both names pass clean() before either is saved; the second insert waits for the
    first's transaction under the names lock and then sees its name. Without the lock both
    rows commit and own capvco-x-y-... names (the first test of this file shows that)."""
    x = Cluster(name="x", account=account)
    x_y = Cluster(name="x-y", account=account)
    x.full_clean()
    x_y.full_clean()  # neither exists yet: both pass
    first_in, errors = threading.Event(), []

    def create_x_and_hold() -> None:
        try:
            with transaction.atomic():
                x.save()
                first_in.set()
                time.sleep(0.5)  # the other create runs meanwhile
        finally:
            connection.close()

    thread = threading.Thread(target=create_x_and_hold)
    thread.start()
    assert first_in.wait(5)
    try:
        x_y.save()
    except ValidationError as exc:
        errors.extend(exc.message_dict["name"])
    thread.join()
    assert sorted(Cluster.objects.values_list("name", flat=True)) == ["x"]
    assert errors == [X_Y_AFTER_X]


def test_the_reservations_page_links_an_owner_name_to_the_cluster_of_its_own_account(
    admin_client: Client,
) -> None:
    """Two customers may each have a cluster `blue`: a leftover vGPU named for `blue`
    links to the `blue` of the account whose listing shows it."""
    ours, theirs = (
        Account.objects.create(
            name=name,
            api_url="https://vco.example/api/1",
            iam_url="https://iam.example",
            customer_id=name,
            credential=JWT,
        )
        for name in ("ours", "theirs")
    )
    blue = {
        account.name: Cluster.objects.create(name="blue", account=account)
        for account in (ours, theirs)
    }
    location = Location.objects.create(account=ours, name="nl-1")
    VgpuReservation.objects.create(
        location=location, name="capvco-blue-a-0-gpu-0", vgpu_id="v-1", gpu_id="g",
        owner_cluster="blue", owner_machine="a-0", state=VgpuReservation.State.RESERVED,
    )  # fmt: skip

    page = admin_client.get("/reservations/").content.decode()

    assert f'href="/clusters/{blue["ours"].pk}/">blue</a>' in page
    assert f'href="/clusters/{blue["theirs"].pk}/"' not in page
