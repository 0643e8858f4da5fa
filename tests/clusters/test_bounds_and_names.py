"""Bounds and names: what the models accept is the same on SQLite and PostgreSQL, bad input
is a 400 naming the field (never a 500), the database refuses what slips past the models,
and the OpenAPI schema says what is accepted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from capvco_web.environment import pool_max_replicas
from cloud.models import Account
from clusters.models import Cluster, ClusterSite, MachinePool
from tests.clusters.conftest import JWT

pytestmark = pytest.mark.django_db

BIG = 2**63  # past every integer column


def account_body(**changes: Any) -> dict[str, Any]:
    return {
        "name": "b", "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
        "customer_id": "c2", "credential": JWT, **changes,
    }  # fmt: skip


# --- bounds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("orphan_grace_period", "91 00:00:00"),
        ("orphan_grace_period", "-1 00:00:00"),
        ("orphan_grace_period", "999999999 00:00:00"),
        ("orphan_grace_period", "P99999999999D"),
        ("orphan_confirmations", 0),
        ("orphan_confirmations", 101),
        ("orphan_confirmations", 40_000),
        ("orphan_confirmations", BIG),
    ],
)
def test_account_orphan_policy_out_of_bounds_is_refused(
    api: APIClient, field: str, value: Any
) -> None:
    response = api.post("/api/v1/accounts/", account_body(**{field: value}), format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [field]
    assert not Account.objects.exists()


def test_account_orphan_policy_at_its_bounds_is_accepted(api: APIClient) -> None:
    body = account_body(orphan_grace_period="90 00:00:00", orphan_confirmations=100)
    assert api.post("/api/v1/accounts/", body, format="json").status_code == 201
    body = account_body(name="c", orphan_grace_period="00:00:00", orphan_confirmations=1)
    assert api.post("/api/v1/accounts/", body, format="json").status_code == 201


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vcpus", 0),
        ("vcpus", 257),
        ("vcpus", 40_000),
        ("memory_mib", 511),
        ("memory_mib", 4 * 1024 * 1024 + 1),
        ("memory_mib", BIG),
        ("disk_gib", 9),
        ("disk_gib", 64 * 1024 + 1),
        ("disk_gib", -1),
        ("replicas", 1001),
        ("replicas", BIG),
    ],
)
def test_pool_size_out_of_bounds_is_refused(
    api: APIClient, site: ClusterSite, field: str, value: int
) -> None:
    body = {"cluster": site.cluster_id, "site": site.pk, "name": "cpu", field: value}
    response = api.post("/api/v1/pools/", body, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [field]
    assert not MachinePool.objects.exists()


def test_pool_size_at_its_bounds_is_accepted(api: APIClient, site: ClusterSite) -> None:
    body = {
        "cluster": site.cluster_id, "site": site.pk, "name": "big", "replicas": 1000,
        "vcpus": 256, "memory_mib": 4 * 1024 * 1024, "disk_gib": 64 * 1024,
    }  # fmt: skip
    assert api.post("/api/v1/pools/", body, format="json").status_code == 201


@pytest.mark.parametrize(("bound", "replicas", "status"), [(5000, 5000, 201), (10, 11, 400)])
def test_pool_size_bound_is_the_setting_read_when_checked(
    api: APIClient, site: ClusterSite, settings: Any, bound: int, replicas: int, status: int
) -> None:
    settings.POOL_MAX_REPLICAS = bound
    body = {"cluster": site.cluster_id, "site": site.pk, "name": "p", "replicas": replicas}
    assert api.post("/api/v1/pools/", body, format="json").status_code == status
    assert MachinePool.objects.filter(replicas=replicas).exists() == (status == 201)


@pytest.mark.parametrize("value", [0, 10_001])
def test_a_pool_bound_the_database_cannot_hold_stops_startup_naming_it(value: int) -> None:
    with pytest.raises(ImproperlyConfigured, match=f"POOL_MAX_REPLICAS={value} is out of range"):
        pool_max_replicas(value)


@pytest.mark.parametrize("image_id", [2**31, BIG, -1])
def test_site_image_id_out_of_bounds_is_refused(
    api: APIClient, site: ClusterSite, image_id: int
) -> None:
    cluster = Cluster.objects.create(name="other", account=site.cluster.account)
    body = {"cluster": cluster.pk, "location": site.location_id, "cloudspace_id": "cs-2"}
    response = api.post("/api/v1/sites/", {**body, "image_id": image_id}, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["image_id"]


@pytest.mark.parametrize(
    "changes",
    [
        {"orphan_grace_period": timedelta(days=91)},
        {"orphan_grace_period": timedelta(seconds=-1)},
        {"orphan_confirmations": 0},
        {"orphan_confirmations": 101},
    ],
)
def test_database_refuses_an_account_orphan_policy_out_of_bounds(
    site: ClusterSite, changes: dict[str, Any]
) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Account.objects.filter(pk=site.cluster.account_id).update(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"vcpus": 0},
        {"vcpus": 257},
        {"memory_mib": 511},
        {"memory_mib": 4 * 1024 * 1024 + 1},
        {"disk_gib": 9},
        {"disk_gib": 64 * 1024 + 1},
        {"replicas": 10_001},
    ],
)
def test_database_refuses_a_pool_size_out_of_bounds(
    site: ClusterSite, changes: dict[str, Any]
) -> None:
    pool = MachinePool.objects.create(cluster=site.cluster, site=site, name="cpu")
    with pytest.raises(IntegrityError), transaction.atomic():
        MachinePool.objects.filter(pk=pool.pk).update(**changes)


def test_schema_states_the_bounds(api: APIClient) -> None:
    schemas = api.get("/api/v1/schema/", {"format": "json"}).json()["components"]["schemas"]
    pool, account = schemas["MachinePool"]["properties"], schemas["Account"]["properties"]
    assert (pool["vcpus"]["minimum"], pool["vcpus"]["maximum"]) == (1, 256)
    assert (pool["memory_mib"]["minimum"], pool["memory_mib"]["maximum"]) == (512, 4194304)
    assert (pool["disk_gib"]["minimum"], pool["disk_gib"]["maximum"]) == (10, 65536)
    assert (pool["replicas"]["minimum"], pool["replicas"]["maximum"]) == (0, 1000)
    assert schemas["ClusterSite"]["properties"]["image_id"]["maximum"] == 2**31 - 1
    confirmations = account["orphan_confirmations"]
    assert (confirmations["minimum"], confirmations["maximum"]) == (1, 100)
    credential = schemas["AccountRequest"]["properties"]["credential"]  # write-only
    assert credential["maxLength"] == 8192
    assert "pattern" in credential
    assert account["name"]["maxLength"] == 100
    assert "pattern" in account["name"]
    gpu = schemas["PoolGpuRequest"]["properties"]
    assert (gpu["count"]["minimum"], gpu["count"]["maximum"]) == (0, 8)
    # A text that may be blank: its pattern takes "" (visible text), or oneOf [the text as
    # the model wants it, ""].
    gpu_type, profile, driver = gpu["type"], gpu["profileId"], gpu["driverVersion"]["oneOf"][0]
    assert gpu_type["maxLength"] == profile["maxLength"] == 100
    assert "pattern" in gpu_type and "pattern" in profile
    assert driver["maxLength"] == 40
    assert "pattern" in driver


# --- names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("acme\u200b", "U+200B"),  # zero width space
        ("acme\u202eemca", "U+202E"),  # right-to-left override
        ("ac\u2066me", "U+2066"),  # left-to-right isolate
        ("ac\u00a0me", "U+00A0"),  # no-break space
        ("ac\tme", "U+0009"),
        ("acme\U000e0041", "U+E0041"),  # a tag character: invisible
    ],
)
def test_account_name_with_an_invisible_character_is_refused_naming_it(
    api: APIClient, name: str, shown: str
) -> None:
    response = api.post("/api/v1/accounts/", account_body(name=name), format="json")
    assert response.status_code == 400
    assert shown in response.json()["fields"]["name"][0]
    assert not Account.objects.exists()


def test_account_name_with_a_nul_is_refused(api: APIClient) -> None:
    response = api.post("/api/v1/accounts/", account_body(name="ac\x00me"), format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["name"]


def test_names_in_other_scripts_are_accepted(api: APIClient) -> None:
    body = account_body(name="Ακμή — 株式会社 (prod)")
    assert api.post("/api/v1/accounts/", body, format="json").status_code == 201


def test_site_cloudspace_id_with_an_invisible_character_is_refused(
    api: APIClient, site: ClusterSite
) -> None:
    cluster = Cluster.objects.create(name="other", account=site.cluster.account)
    body = {"cluster": cluster.pk, "location": site.location_id, "image_id": 1}
    response = api.post("/api/v1/sites/", {**body, "cloudspace_id": "cs\u200b-2"}, format="json")
    assert response.status_code == 400
    assert "U+200B" in response.json()["fields"]["cloudspace_id"][0]


@pytest.mark.parametrize(
    ("gpu", "field"),
    [
        ({"type": "T" * 101, "count": 1}, "type"),
        ({"profileId": "p" * 101, "count": 1}, "profileId"),
        ({"type": "T4", "count": 1, "driverVersion": "5" * 41}, "driverVersion"),
        ({"type": "T4", "count": 9}, "count"),
    ],
)
def test_pool_gpu_request_out_of_bounds_is_refused_on_its_field(
    api: APIClient, site: ClusterSite, gpu: dict[str, Any], field: str
) -> None:
    body = {"cluster": site.cluster_id, "site": site.pk, "name": "gpu", "gpu": gpu}
    response = api.post("/api/v1/pools/", body, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]["gpu"]) == [field]


def test_pool_gpu_type_with_an_invisible_character_is_refused(
    api: APIClient, site: ClusterSite
) -> None:
    body = {"cluster": site.cluster_id, "site": site.pk, "name": "gpu"}
    gpu = {"type": "NVIDIA\u200b A100", "count": 1}
    response = api.post("/api/v1/pools/", {**body, "gpu": gpu}, format="json")
    assert response.status_code == 400
    assert "U+200B" in response.json()["fields"]["gpu"]["type"][0]


@pytest.mark.parametrize("name", ["prod\n", "prod\u200b", "pr\x00od"])
def test_cluster_name_with_a_trailing_line_break_or_invisible_character_is_refused(
    site: ClusterSite, name: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Cluster(name=name, account=site.cluster.account).full_clean()
    assert "name" in caught.value.message_dict


def test_admin_refuses_an_account_name_with_an_invisible_character(
    admin_client: Client, site: ClusterSite
) -> None:
    account = site.cluster.account
    response = admin_client.post(
        reverse("admin:cloud_account_change", args=[account.pk]),
        {"name": "acme\u202e", "api_url": account.api_url, "iam_url": account.iam_url,
         "customer_id": account.customer_id, "orphan_grace_period": "01:00:00",
         "orphan_confirmations": 3, "new_credential": ""},
    )  # fmt: skip
    assert response.status_code == 200
    assert "U+202E" in response.content.decode()
    account.refresh_from_db()
    assert account.name == "acme"


@pytest.mark.django_db(transaction=True)
def test_migration_brings_rows_written_before_the_bounds_inside_them() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("clusters", "0005_vm_orphans")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    apps = MigrationExecutor(connection).loader.project_state(before).apps
    account = apps.get_model("clusters", "Account").objects.create(
        name="old", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c", credential=JWT, orphan_grace_period=timedelta(days=999_999),
        orphan_confirmations=30_000,
    )  # fmt: skip
    cluster = apps.get_model("clusters", "Cluster").objects.create(name="old", account=account)
    location = apps.get_model("clusters", "Location").objects.create(account=account, name="l")
    site = apps.get_model("clusters", "ClusterSite").objects.create(
        cluster=cluster, location=location, cloudspace_id="cs", image_id=1
    )
    apps.get_model("clusters", "MachinePool").objects.create(
        cluster=cluster, site=site, name="big", vcpus=1000, memory_mib=1, disk_gib=10**9
    )

    MigrationExecutor(connection).migrate(latest)

    migrated = Account.objects.get(name="old")
    assert (migrated.orphan_grace_period, migrated.orphan_confirmations) == (
        timedelta(days=90),
        100,
    )
    pool = MachinePool.objects.get(name="big")
    assert (pool.vcpus, pool.memory_mib, pool.disk_gib) == (256, 512, 65536)
