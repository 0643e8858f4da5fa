"""The RBAC manifests of the guides are valid Kubernetes and allow every call the control
plane makes, as the fake API server logged them: in a workload cluster (observe, GPU
labels, the GPU add-on on and off, GPU use read from dcgm-exporter) and in a management
cluster (the CAPI import)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cloud.models import Account
from clusters.models import Cluster, MachinePool
from clusters.tasks import import_capi_account
from kube.tasks import observe_cluster_kube
from tests.factories import AccountFactory, GpuProfileFactory, VgpuReservationFactory
from tests.kube_sim import KubeSimulator, dcgm_exporter_objects, node_object

GUIDES = Path(__file__).resolve().parents[2] / "docs" / "guides"
WORKLOAD, MANAGEMENT = GUIDES / "kubernetes-rbac.yaml", GUIDES / "capi-rbac.yaml"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def allowed(path: Path, call: dict[str, Any]) -> bool:
    """Whether the roles of `path` let its ServiceAccount make `call` (from the log)."""
    verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}[call["method"]]  # fmt: skip
    parts = call["path"].strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:  # a subresource: pods/proxy, whose path runs on
        resource = f"{resource}/{rest[2]}"
    if call["method"] == "GET" and not name:
        verb = "list"
    for role in documents(path):
        if role["kind"] not in ("ClusterRole", "Role"):
            continue
        if role["kind"] == "Role" and role["metadata"]["namespace"] != namespace:
            continue
        for rule in role["rules"]:
            names = rule.get("resourceNames")
            if (
                group in rule["apiGroups"]
                and resource in rule["resources"]
                and verb in rule["verbs"]
                and (names is None or name in names)
            ):
                return True
    return False


@pytest.mark.parametrize("path", [WORKLOAD, MANAGEMENT], ids=lambda p: p.name)
def test_the_rbac_manifests_are_valid_kubernetes(path: Path) -> None:
    for document in documents(path):
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.django_db
def test_the_workload_rbac_allows_every_call_of_observe_labels_and_the_addon(
    kube_sim: KubeSimulator, pool: MachinePool, settings: Any
) -> None:
    GpuProfileFactory(location=pool.site.location, profile_id="card", model="T4 (0000:3b:00.0)")
    for machine in pool.machines.all():
        VgpuReservationFactory(machine=machine, location=pool.site.location, gpu_id="card")
    served = kube_sim.cluster("prod")
    node = "capvco-prod-gpu-0"
    kube_sim.put("prod", node_object(node, gpus=1), *dcgm_exporter_objects(node))
    kube_sim.dcgm(
        "prod", {node: [{"gpu": 0, "uuid": "GPU-1", "samples": [{"util": 1, "fb_used": 2}]}]}
    )
    Cluster.objects.filter(pk=pool.cluster_id).update(
        kubeconfig=served.kubeconfig_yaml, gpu_addon=True
    )
    observe_cluster_kube(pool.cluster_id)  # labels, add-on created
    settings.GPU_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    observe_cluster_kube(pool.cluster_id)  # add-on replaced
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=False)
    observe_cluster_kube(pool.cluster_id)  # add-on removed

    calls = kube_sim.calls("prod")
    made = {(c["method"], c["operation"]) for c in calls}
    assert {("PATCH", "patch nodes"), ("POST", "create daemonsets"), ("GET", "get daemonsets"),
            ("PUT", "update daemonsets"), ("DELETE", "delete daemonsets"),
            ("GET", "list services"), ("GET", "get pods/proxy")} <= made  # fmt: skip
    assert [c["path"] for c in calls if not allowed(WORKLOAD, c)] == []


@pytest.mark.django_db
def test_the_management_rbac_allows_every_call_of_the_import(
    kube_sim: KubeSimulator, settings: Any
) -> None:
    served = kube_sim.cluster("mgmt")
    kube_sim.put("mgmt", *yaml.safe_load_all((GUIDES / "capi-crds.yaml").read_text()))
    account: Account = AccountFactory(capi_kubeconfig=served.kubeconfig_yaml)

    import_capi_account(account.pk)

    calls = kube_sim.calls("mgmt")
    assert len(calls) == 4
    assert [c["path"] for c in calls if not allowed(MANAGEMENT, c)] == []
