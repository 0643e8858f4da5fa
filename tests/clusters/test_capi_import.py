"""Cluster API import: Clusters, MachineDeployments and their VCO objects in a management
cluster become imported clusters, sites and pool generations; replicas follow, a template
change makes a new generation, a deleted Cluster is torn down; nothing destructive comes
from a partial listing; people cannot change imported rows. The official client (as CAPI
and kubectl would use it) and the fake API server over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_validate
import pytest
import yaml
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from capvco_web.audit import SECRET_KEPT
from capvco_web.models import AuditEvent
from cloud.models import Account, Location
from clusters.capi_import import pool_base_name
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.plan import cluster_plan
from clusters.services import (
    IMPORT_ACTOR,
    ImportedReadOnly,
    account_capi_kubeconfig_set,
    cluster_delete,
    cluster_gpu_addon_set,
    pool_scale,
    pool_update,
    site_delete,
)
from clusters.tasks import import_capi_account, observe_all
from gpus.models import GpuProfile, VgpuReservation
from tests.factories import JWT
from tests.kube_sim import KubeSimulator, SimCluster

pytestmark = pytest.mark.django_db

CRDS = Path(__file__).resolve().parents[2] / "docs" / "guides" / "capi-crds.yaml"
NS = "capi"
CAPI = ("cluster.x-k8s.io", "v1beta1")
INFRA = ("infrastructure.cluster.x-k8s.io", "v1beta1")
GPU_LABEL = "capvco.infrastructure.cluster.x-k8s.io/gpu"


def capi_cluster(name: str, *, gpu: bool = True, infra_kind: str = "VCOCluster") -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": name, "labels": {GPU_LABEL: "nvidia"} if gpu else {}},
        "spec": {
            "infrastructureRef": {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": infra_kind,
                "name": name,
            }
        },
    }


def vco_cluster(name: str, *, location: str = "nl-1", image: int = 7) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "VCOCluster",
        "metadata": {"name": name},
        "spec": {"location": location, "cloudspaceId": f"cs-{name}", "imageId": image},
    }


def template(name: str, *, gpu_type: str = "NVIDIA A100", count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "VCOMachineTemplate",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "vcpus": 8,
                    "memoryMiB": 32768,
                    "diskGiB": 100,
                    "gpu": {"type": gpu_type, "count": count, "driverVersion": "550.90.07"},
                    "sriov": {"credentialSecretRef": {"name": "sriov-cred"}},
                }
            }
        },
    }


def deployment(name: str, cluster: str, template_name: str, replicas: Any = 2) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": name},
        "spec": {
            "clusterName": cluster,
            "replicas": replicas,
            "template": {
                "spec": {
                    "clusterName": cluster,
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "VCOMachineTemplate",
                        "name": template_name,
                    },
                }
            },
        },
    }


@pytest.fixture
def account(db: None) -> Account:
    account = Account.objects.create(
        name="acme", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c1", credential=JWT,
    )  # fmt: skip
    location = Location.objects.create(account=account, name="nl-1")
    for card, model in [("a100-1", "A100 0000:3b:00.0"), ("t4-1", "T4 0000:5e:00.0")]:
        GpuProfile.objects.create(
            location=location, profile_id=card, vendor="NVIDIA", model=model, available_instances=4
        )
    return account


@pytest.fixture
def mgmt(kube_sim: KubeSimulator, account: Account) -> SimCluster:
    """A management cluster serving the CRDs of docs/guides/capi-crds.yaml, with namespace
    `capi`, its kubeconfig stored on the account."""
    found = kube_sim.cluster("mgmt")
    kube_sim.put("mgmt", *yaml.safe_load_all(CRDS.read_text()))
    kube_sim.put("mgmt", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    Account.objects.filter(pk=account.pk).update(capi_kubeconfig=found.kubeconfig_yaml)
    return found


@pytest.fixture
def custom(mgmt: SimCluster) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(
        kubernetes.config.new_client_from_config_dict(mgmt.kubeconfig)
    )


Create = Callable[..., None]


@pytest.fixture
def create(custom: kubernetes.client.CustomObjectsApi) -> Create:
    """Create CAPI objects in namespace `capi`, as CAPI's users do (kubectl apply)."""

    def run(*objects: dict[str, Any]) -> None:
        for obj in objects:
            group, version = obj["apiVersion"].split("/")
            plural = obj["kind"].lower() + "s"
            custom.create_namespaced_custom_object(group, version, NS, plural, obj)

    return run


@pytest.fixture
def prod(create: Create) -> None:
    """CAPI cluster `prod` (GPU add-on label on) with MachineDeployment `prod-md-0` of 2
    replicas from template `a100-v1`."""
    create(
        capi_cluster("prod"),
        vco_cluster("prod"),
        template("a100-v1"),
        deployment("prod-md-0", "prod", "a100-v1"),
    )


def run_import(account: Account) -> None:
    import_capi_account(account.pk)


def pools() -> dict[str, tuple[int, str, int]]:
    return {
        p.name: (p.replicas, p.gpu_type, p.import_generation)
        for p in MachinePool.objects.filter(cluster__name="prod")
    }


def running(pool: str, n: int) -> None:
    found = MachinePool.objects.get(name=pool)
    for index in range(n):
        Machine.objects.create(
            pool=found, name=f"{pool}-{index}", index=index, phase=Machine.Phase.RUNNING
        )


# --- the shape assumed ------------------------------------------------------------------


def test_the_crds_shipped_are_valid_kubernetes() -> None:
    documents = list(yaml.safe_load_all(CRDS.read_text()))
    for document in documents:
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)
    assert sorted(d["metadata"]["name"] for d in documents) == [
        "clusters.cluster.x-k8s.io",
        "machinedeployments.cluster.x-k8s.io",
        "vcoclusters.infrastructure.cluster.x-k8s.io",
        "vcomachinetemplates.infrastructure.cluster.x-k8s.io",
    ]


@pytest.mark.parametrize(
    ("cluster", "deployment_name", "pool"),
    [("prod", "prod-md-0", "md-0"), ("prod", "workers", "workers"), ("prod", "prod-", "prod-")],
)
def test_a_pool_is_named_after_its_machine_deployment_without_the_cluster_prefix(
    cluster: str, deployment_name: str, pool: str
) -> None:
    assert pool_base_name(cluster, deployment_name) == pool


# --- create, update, delete -------------------------------------------------------------


def test_a_capi_cluster_is_imported_with_its_site_and_pool(account: Account, prod: None) -> None:
    run_import(account)

    cluster = Cluster.objects.get(name="prod")
    assert (cluster.account, cluster.imported_from, cluster.gpu_addon) == (
        account,
        "capi/prod",
        True,
    )
    site = ClusterSite.objects.get(cluster=cluster)
    assert (site.location.name, site.cloudspace_id, site.image_id) == ("nl-1", "cs-prod", 7)
    pool = MachinePool.objects.get(cluster=cluster)
    assert (pool.name, pool.site, pool.replicas, pool.imported_from) == (
        "md-0-g1", site, 2, "capi/prod-md-0",
    )  # fmt: skip
    assert (pool.vcpus, pool.memory_mib, pool.disk_gib) == (8, 32768, 100)
    assert (pool.gpu_type, pool.gpu_count, pool.gpu_driver_version) == (
        "NVIDIA A100",
        1,
        "550.90.07",
    )
    assert pool.capi_sriov_secret_ref == "capi/sriov-cred"
    account.refresh_from_db()
    assert (account.capi_import_complete, account.capi_import_error) == (True, "")
    assert account.capi_last_complete_import_at == account.capi_import_started_at
    audited = AuditEvent.objects.filter(actor_name=IMPORT_ACTOR).order_by("pk")
    assert [(e.action, e.reason) for e in audited] == [
        ("cluster.create", "imported from Cluster API Cluster capi/prod"),
        ("site.create", "imported from VCOCluster capi/prod"),
        (
            "pool.create",
            "Cluster API MachineDeployment capi/prod-md-0, VCOMachineTemplate capi/a100-v1",
        ),
    ]


def test_a_second_import_of_unchanged_objects_writes_nothing_but_the_stamp(
    account: Account, prod: None, kube_sim: KubeSimulator
) -> None:
    run_import(account)
    kube_sim.clear_calls()

    with CaptureQueriesContext(connection) as queries:
        run_import(account)

    written = [
        q["sql"][:60]
        for q in queries.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))
    ]
    assert len(written) == 1 and written[0].startswith('UPDATE "cloud_account"')
    calls = kube_sim.calls("mgmt")
    assert [c["operation"] for c in calls] == [
        "list clusters", "list machinedeployments", "list vcoclusters", "list vcomachinetemplates",
    ]  # fmt: skip


def test_replicas_follow_the_machine_deployment(
    account: Account, prod: None, custom: kubernetes.client.CustomObjectsApi
) -> None:
    run_import(account)
    custom.patch_namespaced_custom_object(
        *CAPI, NS, "machinedeployments", "prod-md-0", {"spec": {"replicas": 5}}
    )

    run_import(account)

    assert pools() == {"md-0-g1": (5, "NVIDIA A100", 1)}
    scaled = AuditEvent.objects.get(action="pool.update")
    assert (scaled.before, scaled.after) == ({"replicas": 2}, {"replicas": 5})


def test_a_gpu_type_change_makes_a_new_generation_and_drains_the_old_once_it_runs(
    account: Account, prod: None, create: Create, custom: kubernetes.client.CustomObjectsApi
) -> None:
    run_import(account)
    running("md-0-g1", 2)
    create(template("t4-v1", gpu_type="NVIDIA T4"))
    custom.patch_namespaced_custom_object(
        *CAPI, NS, "machinedeployments", "prod-md-0",
        {"spec": {"template": {"spec": {"infrastructureRef": {"name": "t4-v1"}}}}},
    )  # fmt: skip

    run_import(account)
    # The new generation is made; the old one keeps its machines until the new one runs.
    assert pools() == {"md-0-g1": (2, "NVIDIA A100", 1), "md-0-g2": (2, "NVIDIA T4", 2)}

    running("md-0-g2", 1)
    run_import(account)
    assert pools()["md-0-g1"][0] == 2

    Machine.objects.create(
        pool=MachinePool.objects.get(name="md-0-g2"), name="md-0-g2-1", index=1,
        phase=Machine.Phase.RUNNING,
    )  # fmt: skip
    run_import(account)
    assert pools()["md-0-g1"][0] == 0  # scaled to 0: the reconciler tears its machines down

    Machine.objects.filter(pool__name="md-0-g1").delete()  # torn down
    run_import(account)
    assert pools() == {"md-0-g2": (2, "NVIDIA T4", 2)}
    assert AuditEvent.objects.filter(action="pool.delete", actor_name=IMPORT_ACTOR).count() == 1


NEVER_FITS = (
    "GPU type 'NVIDIA H100' is not offered in nl-1: nl-1 offers NVIDIA A100 (up to 4 per "
    "card), NVIDIA T4 (up to 4)."
)


def test_a_pool_that_can_never_fit_is_imported_with_its_condition_false_and_no_machine(
    account: Account, create: Create, api: APIClient
) -> None:
    create(
        capi_cluster("prod"),
        vco_cluster("prod"),
        template("h100-v1", gpu_type="NVIDIA H100"),
        deployment("prod-md-0", "prod", "h100-v1"),
    )

    run_import(account)

    pool = MachinePool.objects.get(cluster__name="prod")
    refused = [
        {"type": "GpuFits", "status": "False", "reason": "GpuNeverFits", "message": NEVER_FITS}
    ]
    assert pool.conditions == refused
    assert api.get(f"/api/v1/pools/{pool.pk}/").json()["conditions"] == refused
    account.refresh_from_db()
    assert NEVER_FITS in account.capi_import_error
    # Nothing is made for it, so nothing is reserved, however often the loop runs.
    assert cluster_plan(pool.cluster).steps == []
    assert not Machine.objects.exists() and not VgpuReservation.objects.exists()

    # The location gets the type: the next pass says it fits, and machines follow.
    GpuProfile.objects.create(
        location=pool.site.location, profile_id="h100-1", vendor="NVIDIA",
        model="H100 0000:7a:00.0", available_instances=2,
    )  # fmt: skip
    run_import(account)

    pool.refresh_from_db()
    assert [c["status"] for c in pool.conditions] == ["True"]
    assert [s.kind for s in cluster_plan(pool.cluster).steps] == ["create", "create"]


def test_a_template_change_that_can_never_fit_leaves_the_old_generation_serving(
    account: Account, prod: None, create: Create, custom: kubernetes.client.CustomObjectsApi
) -> None:
    run_import(account)
    running("md-0-g1", 2)
    create(template("a100-x8", count=8))
    custom.patch_namespaced_custom_object(
        *CAPI, NS, "machinedeployments", "prod-md-0",
        {"spec": {"template": {"spec": {"infrastructureRef": {"name": "a100-x8"}}}}},
    )  # fmt: skip

    run_import(account)
    run_import(account)

    assert pools() == {"md-0-g1": (2, "NVIDIA A100", 1), "md-0-g2": (2, "NVIDIA A100", 2)}
    new = MachinePool.objects.get(name="md-0-g2")
    assert new.conditions[0]["status"] == "False"
    assert "8 GPUs of type 'NVIDIA A100' on one machine can never fit" in new.gpu_fit_refusal
    assert not new.machines.exists()


def test_a_machine_deployment_deleted_drains_its_pool(
    account: Account, prod: None, custom: kubernetes.client.CustomObjectsApi
) -> None:
    run_import(account)
    running("md-0-g1", 1)
    custom.delete_namespaced_custom_object(*CAPI, NS, "machinedeployments", "prod-md-0")

    run_import(account)
    assert pools() == {"md-0-g1": (0, "NVIDIA A100", 1)}

    Machine.objects.filter(pool__name="md-0-g1").delete()
    run_import(account)
    assert pools() == {}


def test_deleting_the_capi_cluster_deletes_ours_through_the_normal_teardown(
    account: Account, prod: None, custom: kubernetes.client.CustomObjectsApi
) -> None:
    run_import(account)
    custom.delete_namespaced_custom_object(*CAPI, NS, "clusters", "prod")

    run_import(account)

    cluster = Cluster.objects.get(name="prod")
    assert cluster.state == Cluster.State.DELETING
    requested = AuditEvent.objects.get(action="cluster.delete_requested")
    assert (requested.actor_name, requested.reason) == (
        IMPORT_ACTOR, "Cluster API Cluster capi/prod no longer exists",
    )  # fmt: skip


def test_the_gpu_label_of_the_capi_cluster_turns_the_addon_on_and_off(
    account: Account, prod: None, custom: kubernetes.client.CustomObjectsApi
) -> None:
    run_import(account)
    custom.patch_namespaced_custom_object(
        *CAPI, NS, "clusters", "prod", {"metadata": {"labels": {GPU_LABEL: None}}}
    )

    run_import(account)

    assert not Cluster.objects.get(name="prod").gpu_addon


@pytest.mark.parametrize(
    "fault",
    [
        {"operation": "list clusters", "status": 503},
        {"operation": "list machinedeployments", "lost_response": "truncate"},
        {"operation": "list vcomachinetemplates", "latency_ms": 1500},
    ],
    ids=["clusters-5xx", "deployments-cut-short", "templates-timeout"],
)
def test_a_partial_listing_deletes_nothing_and_scales_nothing_down(
    account: Account,
    prod: None,
    create: Create,
    custom: kubernetes.client.CustomObjectsApi,
    kube_sim: KubeSimulator,
    settings: Any,
    fault: dict[str, Any],
) -> None:
    settings.KUBE_READ_TIMEOUT = 1.0
    create(
        capi_cluster("edge"),
        vco_cluster("edge"),
        template("edge-v1"),
        deployment("edge-md", "edge", "edge-v1"),
    )
    run_import(account)
    custom.delete_namespaced_custom_object(*CAPI, NS, "clusters", "prod")
    custom.delete_namespaced_custom_object(*CAPI, NS, "machinedeployments", "edge-md")
    kube_sim.fault(**fault)

    run_import(account)

    assert Cluster.objects.get(name="prod").state == Cluster.State.ACTIVE
    assert MachinePool.objects.get(name="md-g1").replicas == 2
    account.refresh_from_db()
    assert not account.capi_import_complete and account.capi_import_error

    kube_sim.clear_faults()
    run_import(account)
    assert Cluster.objects.get(name="prod").state == Cluster.State.DELETING
    assert not MachinePool.objects.filter(name="md-g1").exists()  # drained, had no machine


def test_an_object_that_cannot_be_read_is_neither_imported_nor_taken_for_gone(
    account: Account, prod: None, create: Create, custom: kubernetes.client.CustomObjectsApi
) -> None:
    run_import(account)
    custom.patch_namespaced_custom_object(
        *CAPI, NS, "machinedeployments", "prod-md-0", {"spec": {"replicas": "two"}}
    )
    create(capi_cluster("far"), vco_cluster("far", location="us-9"))
    create(capi_cluster("docker", infra_kind="DockerCluster"))

    run_import(account)

    assert pools() == {"md-0-g1": (2, "NVIDIA A100", 1)}  # not drained
    assert sorted(Cluster.objects.values_list("name", flat=True)) == ["prod"]
    account.refresh_from_db()
    assert account.capi_import_error == (
        "MachineDeployment capi/prod-md-0: spec.replicas must be an integer, not 'two'; "
        "Cluster capi/far: location us-9 of VCOCluster capi/far is not one of account "
        "acme's locations (as whitesky lists them)"
    )


def test_a_name_taken_by_a_cluster_made_here_is_reported_not_adopted(
    account: Account, prod: None
) -> None:
    Cluster.objects.create(name="prod", account=account)

    run_import(account)

    assert not Cluster.objects.get(name="prod").imported
    account.refresh_from_db()
    assert account.capi_import_error == "Cluster capi/prod: name: Cluster 'prod' exists."


def test_the_observe_fan_out_sends_an_import_per_account_with_a_management_cluster(
    account: Account, mgmt: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    Account.objects.create(
        name="other", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c2", credential=JWT,
    )  # fmt: skip
    sent: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(
        "clusters.tasks.send_on_commit",
        lambda task, *args, **options: sent.append((task.name, args)),
    )

    observe_all()

    assert [args for name, args in sent if name.endswith("import_capi_account")] == [(account.pk,)]


# --- imported rows are read-only --------------------------------------------------------


@pytest.fixture
def imported(account: Account, prod: None) -> Cluster:
    run_import(account)
    return Cluster.objects.get(name="prod")


READ_ONLY = "is imported from Cluster API"


def test_the_services_refuse_people_any_change_to_imported_rows(
    imported: Cluster, django_user_model: Any
) -> None:
    boss = django_user_model.objects.create_superuser("boss", password="x")
    pool = MachinePool.objects.get(cluster=imported)

    with pytest.raises(
        ImportedReadOnly,
        match="Pool md-0-g1 is imported from Cluster API "
        r"\(MachineDeployment capi/prod-md-0\): change it in the management",
    ):
        pool_scale(pool=pool, replicas=5, actor=boss, reason="more")
    pool.replicas = 5
    for attempt in (
        lambda: pool_update(pool=pool, actor=boss),
        lambda: cluster_delete(cluster=imported, actor=boss, reason="x", confirm=imported.name),
        lambda: cluster_gpu_addon_set(cluster=imported, enabled=False, actor=boss),
        lambda: site_delete(site=imported.sites.get(), actor=boss),
    ):
        with pytest.raises(PermissionDenied, match=READ_ONLY):
            attempt()
    assert MachinePool.objects.get(pk=pool.pk).replicas == 2
    assert Cluster.objects.get(pk=imported.pk).state == Cluster.State.ACTIVE


def test_the_api_refuses_changes_to_imported_rows_with_the_reason(
    imported: Cluster, api: APIClient
) -> None:
    pool = MachinePool.objects.get(cluster=imported)

    answers = [
        api.patch(f"/api/v1/pools/{pool.pk}/", {"replicas": 5}, format="json"),
        api.post(f"/api/v1/pools/{pool.pk}/scale/", {"replicas": 5, "reason": "x"}, format="json"),
        api.delete(
            f"/api/v1/clusters/{imported.pk}/",
            {"reason": "x", "confirm": imported.name},
            format="json",
        ),
        api.put(f"/api/v1/clusters/{imported.pk}/gpu-addon/", {"enabled": False}, format="json"),
        api.post(
            "/api/v1/pools/",
            {"cluster": imported.pk, "site": imported.sites.get().pk, "name": "extra"},
            format="json",
        ),
    ]

    assert [a.status_code for a in answers] == [403] * 5
    assert all(READ_ONLY in a.json()["detail"] for a in answers)
    listed = api.get(f"/api/v1/clusters/{imported.pk}/").json()
    assert listed["imported_from"] == "capi/prod"
    assert api.get(f"/api/v1/pools/{pool.pk}/").json()["imported_from"] == "capi/prod-md-0"


def test_the_admin_shows_imported_rows_read_only_but_takes_a_kubeconfig(
    imported: Cluster, django_user_model: Any, kube_sim: KubeSimulator
) -> None:
    from django.test import Client

    from tests.clusters.test_admin import cluster_page_data

    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    pool = MachinePool.objects.get(cluster=imported)

    page = client.get(f"/admin/clusters/machinepool/{pool.pk}/change/")
    cluster_page = client.get(f"/admin/clusters/cluster/{imported.pk}/change/")
    posted = client.post(f"/admin/clusters/machinepool/{pool.pk}/change/", {"replicas": 9})
    url, data = cluster_page_data(client, imported)
    workload = kube_sim.cluster("prod").kubeconfig_yaml
    saved = client.post(url, {**data, "new_kubeconfig": workload, "gpu_addon": ""})

    assert page.status_code == 200 and b'name="replicas"' not in page.content
    assert READ_ONLY.encode() in page.content
    assert cluster_page.status_code == 200 and b'name="gpu_addon"' not in cluster_page.content
    assert b'name="new_kubeconfig"' in cluster_page.content
    assert posted.status_code == 403
    assert saved.status_code == 302
    imported.refresh_from_db()
    assert imported.has_kubeconfig and imported.gpu_addon  # the add-on follows CAPI only
    assert MachinePool.objects.get(pk=pool.pk).replicas == 2


# --- the management kubeconfig ----------------------------------------------------------


def test_the_management_kubeconfig_is_write_only_encrypted_and_audited(
    account: Account, mgmt: SimCluster, api: APIClient
) -> None:
    Account.objects.filter(pk=account.pk).update(capi_kubeconfig="")

    put = api.put(
        f"/api/v1/accounts/{account.pk}/capi-kubeconfig/",
        {"kubeconfig": mgmt.kubeconfig_yaml, "reason": "import from mgmt"},
        format="json",
    )
    shown = api.get(f"/api/v1/accounts/{account.pk}/").json()
    bad = api.put(
        f"/api/v1/accounts/{account.pk}/capi-kubeconfig/",
        {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
        format="json",
    )

    assert put.status_code == 204
    assert shown["has_capi_kubeconfig"] is True
    assert mgmt.token not in str(shown)
    with connection.cursor() as cursor:
        cursor.execute("SELECT capi_kubeconfig FROM cloud_account WHERE id = %s", [account.pk])
        assert mgmt.token not in cursor.fetchone()[0]
    assert bad.status_code == 400 and "current-context" in str(bad.json())
    event = AuditEvent.objects.get(action="account.capi_kubeconfig_set")
    assert (event.before, event.after) == ({"server": ""}, {"server": mgmt.server})
    assert mgmt.token not in str(event.before) + str(event.after) + SECRET_KEPT


def test_removing_the_management_kubeconfig_hands_imported_clusters_over(
    imported: Cluster, account: Account, django_user_model: Any
) -> None:
    boss = django_user_model.objects.create_superuser("boss", password="x")

    account_capi_kubeconfig_set(account=account, kubeconfig="", actor=boss, reason="done with CAPI")

    imported.refresh_from_db()
    assert not imported.imported
    pool = MachinePool.objects.get(cluster=imported)
    pool_scale(pool=pool, replicas=3, actor=boss, reason="ours now")
    assert AuditEvent.objects.filter(action="cluster.import_release").count() == 1
    assert not account.has_capi_kubeconfig


def test_the_creator_of_an_account_may_store_its_management_kubeconfig_at_once(
    db: None, mgmt: SimCluster
) -> None:
    from django.contrib.auth.models import Permission

    from capvco_web.permissions import accounts_where
    from cloud.services import account_create
    from tests.factories import UserFactory

    creator = UserFactory()
    creator.user_permissions.add(Permission.objects.get(codename="add_account"))
    assert accounts_where(creator, "cloud.change_account") == set()  # read, and kept
    account = account_create(
        account=Account(
            name="new",
            api_url="https://vco.example/api/1",
            iam_url="https://iam.example",
            customer_id="c9",
            credential=JWT,
        ),
        actor=creator,
    )

    account_capi_kubeconfig_set(account=account, kubeconfig=mgmt.kubeconfig_yaml, actor=creator)

    assert account.has_capi_kubeconfig
