"""The fake API server answers the official client as a real one would: objects with
their metadata filled in, Status errors, selectors, paging with continue tokens,
resourceVersions, the three patch formats, custom kinds."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
import requests
from kubernetes.client import ApiException, CoreV1Api, CustomObjectsApi

from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object

MD = ("cluster.x-k8s.io", "v1beta1")


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return dict(json.loads(exc.value.body))


def a_pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
        "status": {"phase": "Running"},
    }


def test_a_created_pod_gets_its_metadata_and_starts_pending(core: CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", a_pod("web-1"))

    assert created.metadata.namespace == "default"
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert int(created.metadata.resource_version) > 0
    assert created.status.phase == "Pending"  # what the client sent is not kept
    assert core.read_namespaced_pod("web-1", "default").metadata.uid == created.metadata.uid


def test_errors_are_status_objects_as_the_real_server_words_them(core: CoreV1Api) -> None:
    core.create_namespaced_pod("default", a_pod("web-1"))

    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", "default")
    with pytest.raises(ApiException) as twice:
        core.create_namespaced_pod("default", a_pod("web-1"))
    with pytest.raises(ApiException) as no_namespace:
        core.create_namespaced_pod("ghost", a_pod("web-2"))

    assert status_of(missing) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "nope" not found', "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"}, "code": 404,
    }  # fmt: skip
    assert (twice.value.status, status_of(twice)["reason"]) == (409, "AlreadyExists")
    assert status_of(twice)["message"] == 'pods "web-1" already exists'
    assert status_of(no_namespace)["message"] == 'namespaces "ghost" not found'


def test_a_replace_from_a_stale_read_conflicts(core: CoreV1Api) -> None:
    first = core.create_namespaced_pod("default", a_pod("web-1"))
    core.patch_namespaced_pod("web-1", "default", {"metadata": {"labels": {"v": "2"}}})
    first.metadata.labels = {"v": "3"}

    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_pod("web-1", "default", first)

    assert (stale.value.status, status_of(stale)["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status_of(stale)["message"]
    assert core.read_namespaced_pod("web-1", "default").metadata.labels == {"app": "web", "v": "2"}


def test_the_resource_version_moves_only_when_something_changes(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", node_object("n1"))
    before = core.list_node().metadata.resource_version

    same = core.patch_node("n1", {"metadata": {"labels": {"kubernetes.io/hostname": "n1"}}})
    assert core.list_node().metadata.resource_version == before
    assert same.metadata.resource_version == before  # a patch that changes nothing
    changed = core.patch_node("n1", {"metadata": {"labels": {"gpu": "a100"}}})

    assert int(changed.metadata.resource_version) > int(before)
    assert core.list_node().metadata.resource_version == changed.metadata.resource_version


def test_label_and_field_selectors(core: CoreV1Api, kube_sim: KubeSimulator) -> None:
    kube_sim.put(
        "prod",
        node_object("a", labels={"gpu": "a100", "zone": "1"}),
        node_object("b", labels={"gpu": "t4"}),
        node_object("c"),
        pod_object("p1", node="a"), pod_object("p2", node="b"), pod_object("p3", phase="Pending"),
    )  # fmt: skip

    def nodes(selector: str) -> list[str]:
        return [n.metadata.name for n in core.list_node(label_selector=selector).items]

    def pods(selector: str) -> list[str]:
        found = core.list_pod_for_all_namespaces(field_selector=selector).items
        return [p.metadata.name for p in found]

    assert nodes("gpu=a100") == ["a"]
    assert nodes("gpu!=a100") == ["b", "c"]
    assert nodes("gpu in (a100, t4),!zone") == ["b"]
    assert nodes("gpu notin (t4)") == ["a", "c"]
    assert nodes("gpu") == ["a", "b"]
    assert pods("spec.nodeName=a") == ["p1"]
    assert pods("spec.nodeName=") == ["p3"]
    assert pods("status.phase!=Pending,metadata.namespace=default") == ["p1", "p2"]
    with pytest.raises(ApiException) as unsupported:
        pods("spec.image=busybox")
    assert status_of(unsupported)["message"] == "field label not supported: spec.image"


def test_pages_come_from_one_snapshot(core: CoreV1Api, kube_sim: KubeSimulator) -> None:
    kube_sim.put("prod", *[node_object(f"n{i}") for i in range(5)])

    first = core.list_node(limit=2)
    core.delete_node("n3")
    kube_sim.put("prod", node_object("n4", labels={"changed": "yes"}))
    second = core.list_node(limit=2, _continue=first.metadata._continue)
    third = core.list_node(limit=2, _continue=second.metadata._continue)

    assert first.metadata.remaining_item_count == 3
    names = [n.metadata.name for page in (first, second, third) for n in page.items]
    assert names == ["n0", "n1", "n2", "n3", "n4"]  # as they were when the listing began
    assert third.items[0].metadata.labels.get("changed") is None
    assert third.metadata._continue is None
    assert {p.metadata.resource_version for p in (first, second, third)} == {
        first.metadata.resource_version
    }


def test_a_continue_token_past_compaction_is_expired_with_a_token_to_read_on(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", *[node_object(f"n{i}") for i in range(4)])
    first = core.list_node(limit=2)
    kube_sim.put("prod", node_object("n9"))
    kube_sim.compact("prod")

    with pytest.raises(ApiException) as expired:
        core.list_node(limit=2, _continue=first.metadata._continue)

    assert (expired.value.status, status_of(expired)["reason"]) == (410, "Expired")
    # The token in the answer reads on from the current state (inconsistently).
    token = status_of(expired)["metadata"]["continue"]
    rest = core.list_node(limit=10, _continue=token)
    assert [n.metadata.name for n in rest.items] == ["n2", "n3", "n9"]


def test_a_continue_token_older_than_its_lifetime_is_expired(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", *[node_object(f"n{i}") for i in range(3)])
    kube_sim.configure(continue_ttl_seconds=0)
    first = core.list_node(limit=2)
    unchanged = core.list_node(limit=2, _continue=first.metadata._continue)
    kube_sim.put("prod", node_object("n9"))

    with pytest.raises(ApiException) as expired:
        core.list_node(limit=2, _continue=first.metadata._continue)
    # Nothing had changed: the current revision reads on, however old the token.
    assert [n.metadata.name for n in unchanged.items] == ["n2"]
    assert expired.value.status == 410


def test_merge_patches(core: CoreV1Api, kube_sim: KubeSimulator) -> None:
    kube_sim.put("prod", node_object("n1", labels={"old": "x", "keep": "y"}))

    merged = core.patch_node(
        "n1",
        {"metadata": {"labels": {"old": None, "new": "z"}}},
        _content_type="application/merge-patch+json",
    )

    labels = merged.metadata.labels
    assert (labels.get("old"), labels["keep"], labels["new"]) == (None, "y", "z")


def test_strategic_merge_patches_merge_lists_by_their_key(core: CoreV1Api) -> None:
    pod = a_pod("web-1")
    pod["spec"]["containers"].append({"name": "side", "image": "envoy"})
    core.create_namespaced_pod("default", pod)

    patched = core.patch_namespaced_pod(
        "web-1", "default", {"spec": {"containers": [{"name": "side", "image": "envoy:2"}]}}
    )
    status = core.patch_namespaced_pod_status(
        "web-1",
        "default",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}},
    )

    assert [(c.name, c.image) for c in patched.spec.containers] == [
        ("main", "busybox"), ("side", "envoy:2"),
    ]  # fmt: skip
    assert status.status.phase == "Running"
    assert [(c.type, c.status) for c in status.status.conditions] == [("Ready", "True")]


def test_json_patches_and_their_failures(core: CoreV1Api, kube_sim: KubeSimulator) -> None:
    kube_sim.put("prod", node_object("n1", labels={"a": "1"}))

    patched = core.patch_node(
        "n1",
        [
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/labels/capvco.io~1gpu-type", "value": "nvidia-a100"},
            {"op": "remove", "path": "/metadata/labels/a"},
        ],
    )
    with pytest.raises(ApiException) as failed:
        core.patch_node("n1", [{"op": "test", "path": "/metadata/labels/a", "value": "1"}])

    assert patched.metadata.labels["capvco.io/gpu-type"] == "nvidia-a100"
    assert "a" not in patched.metadata.labels
    assert (failed.value.status, status_of(failed)["reason"]) == (422, "Invalid")


@pytest.mark.parametrize(
    ("operations", "status"),
    [
        ([{"op": "add", "path": "/metadata/labels/b"}], 400),  # no value: not a patch
        ([{"op": "frobnicate", "path": "/metadata/labels/a"}], 400),
        ([{"op": "remove", "path": "/metadata/labels/missing"}], 422),
        ([{"op": "replace", "path": "/spec/nowhere/x", "value": 1}], 422),
        ([{"op": "add", "path": "/metadata/finalizers/01", "value": "x"}], 422),
    ],
)
def test_a_json_patch_that_is_malformed_is_a_bad_request_and_one_that_does_not_apply_is_422(
    core: CoreV1Api, kube_sim: KubeSimulator, operations: list[dict[str, Any]], status: int
) -> None:
    kube_sim.put("prod", node_object("n1", labels={"a": "1"}))

    with pytest.raises(ApiException) as failed:
        core.patch_node("n1", operations)

    labels = core.read_node("n1").metadata.labels
    assert failed.value.status == status
    assert labels["a"] == "1" and "b" not in labels  # nothing of the patch was applied


def test_the_status_subresource_is_the_only_way_to_change_status(core: CoreV1Api) -> None:
    core.create_namespaced_pod("default", a_pod("web-1"))

    main = core.patch_namespaced_pod("web-1", "default", {"status": {"phase": "Failed"}})
    sub = core.patch_namespaced_pod_status("web-1", "default", {"status": {"phase": "Succeeded"}})

    assert main.status.phase == "Pending"
    assert sub.status.phase == "Succeeded"


def test_deleting_a_namespace_deletes_what_is_in_it(core: CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_pod("team", a_pod("web-1"))

    core.delete_namespace("team")

    assert core.list_pod_for_all_namespaces().items == []
    with pytest.raises(ApiException) as gone:
        core.read_namespace("team")
    assert gone.value.status == 404


def test_custom_kinds_from_a_crd_are_served_as_custom_objects(
    api_client: kubernetes.client.ApiClient, custom: CustomObjectsApi
) -> None:
    kubernetes.client.ApiextensionsV1Api(api_client).create_custom_resource_definition(
        {
            "metadata": {"name": "machinedeployments.cluster.x-k8s.io"},
            "spec": {
                "group": "cluster.x-k8s.io",
                "scope": "Namespaced",
                "names": {
                    "plural": "machinedeployments", "singular": "machinedeployment",
                    "kind": "MachineDeployment",
                },
                "versions": [
                    {
                        "name": "v1beta1", "served": True, "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object"}},
                        "subresources": {"status": {}},
                    }
                ],
            },
        }
    )  # fmt: skip
    body = {
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
        "metadata": {"name": "md-0"}, "spec": {"replicas": 2}, "status": {"ready": 9},
    }  # fmt: skip

    created = custom.create_namespaced_custom_object(*MD, "default", "machinedeployments", body)
    patched = custom.patch_namespaced_custom_object(
        *MD, "default", "machinedeployments", "md-0", {"spec": {"replicas": 3}}
    )
    listed = custom.list_cluster_custom_object(*MD, "machinedeployments")

    assert created["metadata"]["generation"] == 1 and "status" not in created
    assert (patched["spec"]["replicas"], patched["metadata"]["generation"]) == (3, 2)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["md-0"]
    with pytest.raises(ApiException) as strategic:
        custom.patch_namespaced_custom_object(
            *MD, "default", "machinedeployments", "md-0", {"spec": {"replicas": 4}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
    assert strategic.value.status == 415  # custom kinds take no strategic merge patch


def test_discovery_answers_with_or_without_a_trailing_slash(
    api_client: kubernetes.client.ApiClient, cluster: SimCluster, kube_sim: KubeSimulator
) -> None:
    kube_sim.register("prod", group=MD[0], version=MD[1], plural="clusters", kind="Cluster")
    version = kubernetes.client.VersionApi(api_client).get_code()
    core = kubernetes.client.CoreV1Api(api_client).get_api_resources()
    groups = kubernetes.client.ApisApi(api_client).get_api_versions()
    headers = {"Authorization": f"Bearer {cluster.token}"}

    assert version.major == "1"
    pods = next(r for r in core.resources if r.name == "pods")
    assert (pods.namespaced, pods.kind) == (True, "Pod")
    assert "cluster.x-k8s.io" in [g.name for g in groups.groups]
    for path in ("/version/", "/api/", "/api/v1/", "/apis/", "/apis/cluster.x-k8s.io/v1beta1/"):
        answer = requests.get(
            cluster.server + path, headers=headers, timeout=5, verify=cluster.ca_file
        )
        assert answer.status_code == 200


def test_a_request_without_the_cluster_token_is_unauthorized(cluster: SimCluster) -> None:
    answer = requests.get(f"{cluster.server}/api/v1/nodes", timeout=5, verify=cluster.ca_file)
    assert (answer.status_code, answer.json()["reason"]) == (401, "Unauthorized")


def a_daemonset(name: str, image: str = "registry.example/agent:1") -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "agent", "image": image}]},
            },
        },
        "status": {
            "currentNumberScheduled": 3,
            "desiredNumberScheduled": 3,
            "numberMisscheduled": 0,
            "numberReady": 3,
        },
    }


def test_daemonsets_of_apps_v1_are_created_replaced_and_deleted(
    api_client: kubernetes.client.ApiClient,
) -> None:
    apps = kubernetes.client.AppsV1Api(api_client)

    created = apps.create_namespaced_daemon_set("kube-system", a_daemonset("agent"))
    read = apps.read_namespaced_daemon_set("agent", "kube-system")
    read.spec.template.spec.containers[0].image = "registry.example/agent:2"
    replaced = apps.replace_namespaced_daemon_set("agent", "kube-system", read)
    listed = apps.list_daemon_set_for_all_namespaces(label_selector="app=agent")
    deleted = apps.delete_namespaced_daemon_set("agent", "kube-system")

    assert created.metadata.uid and created.metadata.namespace == "kube-system"
    assert created.status is None  # the controller's to fill, not the client's
    assert (created.metadata.generation, replaced.metadata.generation) == (1, 2)
    assert replaced.spec.template.spec.containers[0].image == "registry.example/agent:2"
    assert [ds.metadata.name for ds in listed.items] == ["agent"]
    assert (deleted["status"], deleted["details"]["name"]) == ("Success", "agent")
    with pytest.raises(ApiException) as gone:
        apps.read_namespaced_daemon_set("agent", "kube-system")
    assert status_of(gone)["message"] == 'daemonsets.apps "agent" not found'
    discovery = kubernetes.client.ApisApi(api_client).get_api_versions()
    assert "apps/v1" in [v.group_version for g in discovery.groups for v in g.versions]
