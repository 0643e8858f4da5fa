"""What the fake API server does with what is written, as a real one: validation (422
Invalid with the real Status shape), dryRun=All, Secrets' write-only stringData,
protobuf bodies refused with 415, field validation, discovery of the verbs served, and
the OpenAPI documents kubectl reads."""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes
import pytest
import requests
from kubernetes.client import ApiException, AppsV1Api, CoreV1Api

from tests.kube_sim import KubeSimulator, SimCluster


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return dict(json.loads(exc.value.body))


@pytest.fixture
def apps(api_client: kubernetes.client.ApiClient) -> AppsV1Api:
    return AppsV1Api(api_client)


def raw(cluster: SimCluster, method: str, path: str, **options: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {cluster.token}", **options.pop("headers", {})}
    return requests.request(
        method, cluster.server + path, headers=headers, timeout=5, verify=cluster.ca_file, **options
    )


def a_daemonset(name: str = "agent", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name} if labels is None else labels},
                "spec": {"containers": [{"name": "main", "image": "registry.example/agent:1"}]},
            },
        },
    }


def test_a_daemonset_whose_selector_misses_its_template_is_invalid_as_the_real_server_says(
    apps: AppsV1Api,
) -> None:
    with pytest.raises(ApiException) as refused:
        apps.create_namespaced_daemon_set("kube-system", a_daemonset(labels={"app": "other"}))

    message = (
        'Invalid value: map[string]string{"app":"other"}: `selector` does not match template '
        "`labels`"
    )
    assert refused.value.status == 422
    assert status_of(refused) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'DaemonSet.apps "agent" is invalid: spec.template.metadata.labels: {message}',
        "reason": "Invalid",
        "details": {
            "name": "agent", "group": "apps", "kind": "DaemonSet",
            "causes": [{"reason": "FieldValueInvalid", "message": message,
                        "field": "spec.template.metadata.labels"}],
        },
        "code": 422,
    }  # fmt: skip
    with pytest.raises(ApiException):
        apps.read_namespaced_daemon_set("agent", "kube-system")  # nothing half-made


def test_names_and_containers_are_validated(core: CoreV1Api, apps: AppsV1Api) -> None:
    pod = {"metadata": {"name": "Web_1"}, "spec": {"containers": []}}
    with pytest.raises(ApiException) as bad_pod:
        core.create_namespaced_pod("default", pod)
    with pytest.raises(ApiException) as bad_namespace:
        core.create_namespace({"metadata": {"name": "team.a"}})  # a label, not a subdomain
    deployment = {**a_daemonset("web"), "kind": "Deployment"}
    deployment["spec"]["template"]["spec"]["containers"] = [{"name": "main"}]
    with pytest.raises(ApiException) as no_image:
        apps.create_namespaced_deployment("default", deployment)

    causes = status_of(bad_pod)["details"]["causes"]
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueInvalid", "metadata.name"),
        ("FieldValueRequired", "spec.containers"),
    ]
    assert status_of(bad_pod)["message"].startswith('Pod "Web_1" is invalid: [metadata.name: ')
    assert "RFC 1123 subdomain" in causes[0]["message"]
    assert "RFC 1123 label" in status_of(bad_namespace)["message"]
    assert status_of(no_image)["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": "spec.template.spec.containers[0].image",
        }
    ]


def test_a_selector_cannot_change(apps: AppsV1Api) -> None:
    apps.create_namespaced_daemon_set("kube-system", a_daemonset())
    changed = a_daemonset(labels={"app": "agent", "tier": "node"})
    changed["spec"]["selector"]["matchLabels"]["tier"] = "node"

    with pytest.raises(ApiException) as replaced:
        apps.replace_namespaced_daemon_set("agent", "kube-system", changed)
    with pytest.raises(ApiException) as patched:
        apps.patch_namespaced_daemon_set("agent", "kube-system", {"spec": changed["spec"]})

    for refused in (replaced, patched):
        cause = status_of(refused)["details"]["causes"][0]
        assert (refused.value.status, cause["field"]) == (422, "spec.selector")
        assert cause["message"].endswith("field is immutable")


def test_dry_run_answers_what_would_be_stored_and_stores_nothing(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    body = {"metadata": {"name": "settings"}, "data": {"mode": "fast"}}
    before = kube_sim.state("prod")["resourceVersion"]
    created = core.create_namespaced_config_map("default", body, dry_run="All")
    assert created.metadata.uid and created.data == {"mode": "fast"}
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("settings", "default")
    assert kube_sim.state("prod")["resourceVersion"] == before

    stored = core.create_namespaced_config_map("default", body)
    patched = core.patch_namespaced_config_map(
        "settings", "default", {"data": {"mode": "slow"}}, dry_run="All"
    )
    stored.data = {"mode": "medium"}
    replaced = core.replace_namespaced_config_map("settings", "default", stored, dry_run="All")
    core.delete_namespaced_config_map("settings", "default", dry_run="All")
    after = kube_sim.state("prod")["resourceVersion"]

    assert (patched.data, replaced.data) == ({"mode": "slow"}, {"mode": "medium"})
    read = core.read_namespaced_config_map("settings", "default")
    assert read.data == {"mode": "fast"}
    assert read.metadata.resource_version == after  # nothing moved
    with pytest.raises(ApiException) as wrong:
        core.create_namespaced_config_map("default", body, dry_run="Sometimes")
    assert wrong.value.status == 400


def test_a_secret_answers_base64_data_and_never_its_string_data(core: CoreV1Api) -> None:
    created = core.create_namespaced_secret(
        "default",
        {"metadata": {"name": "creds"}, "data": {"user": "YWRtaW4="}, "stringData": {"pw": "s3"}},
    )
    core.patch_namespaced_secret("creds", "default", {"stringData": {"user": "root"}})
    read = core.read_namespaced_secret("creds", "default")

    assert created.string_data is None and created.type == "Opaque"
    assert read.string_data is None
    assert {k: base64.b64decode(v).decode() for k, v in read.data.items()} == {
        "user": "root",
        "pw": "s3",
    }
    with pytest.raises(ApiException) as not_base64:
        core.create_namespaced_secret("default", {"metadata": {"name": "x"}, "data": {"k": "%%"}})
    assert not_base64.value.status == 400


def test_a_protobuf_body_is_refused_with_415_so_clients_fall_back_to_json(
    cluster: SimCluster,
) -> None:
    protobuf = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    created = raw(cluster, "POST", "/api/v1/namespaces", data=b"k8s\x00\n\x0f", headers=protobuf)
    deleted = raw(
        cluster, "DELETE", "/api/v1/namespaces/default", data=b"k8s\x00", headers=protobuf
    )

    for answer in (created, deleted):
        assert answer.status_code == 415
        assert answer.json()["reason"] == "UnsupportedMediaType"
    assert raw(cluster, "GET", "/api/v1/namespaces/default").status_code == 200


def test_strict_field_validation_refuses_unknown_fields_and_warn_says_them(
    cluster: SimCluster,
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "imagePullPolice": "x"}]},
    }
    strict = raw(
        cluster, "POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict", json=pod
    )
    warned = raw(cluster, "POST", "/api/v1/namespaces/default/pods", json=pod)

    assert strict.status_code == 400
    assert strict.json()["message"] == (
        'strict decoding error: unknown field "spec.containers[0].imagePullPolice"'
    )
    assert warned.status_code == 201
    assert warned.headers["Warning"] == (
        '299 - "unknown field \\"spec.containers[0].imagePullPolice\\""'
    )


def test_discovery_advertises_only_the_verbs_served(core: CoreV1Api) -> None:
    pods = next(r for r in core.get_api_resources().resources if r.name == "pods")

    assert sorted(pods.verbs) == ["create", "delete", "get", "list", "patch", "update", "watch"]
    assert pods.categories == ["all"]


def test_openapi_v2_and_v3_describe_the_kinds_served(cluster: SimCluster) -> None:
    v2 = raw(cluster, "GET", "/openapi/v2", headers={"Accept": "application/json"}).json()
    as_protobuf = raw(
        cluster,
        "GET",
        "/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    index = raw(cluster, "GET", "/openapi/v3").json()
    apps_url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
    apps_v3 = requests.get(
        cluster.server.split("/clusters/")[0] + apps_url,
        headers={"Authorization": f"Bearer {cluster.token}"},
        timeout=5,
        verify=cluster.ca_file,
    ).json()

    containers = v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert v2["swagger"] == "2.0"
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["items"] == {"$ref": "#/definitions/io.k8s.api.core.v1.Container"}
    assert "io.k8s.api.batch.v1.Job" in v2["definitions"]
    assert "io.k8s.api.batch.v1.CronJob" not in v2["definitions"]  # not served
    assert as_protobuf.status_code == 406  # JSON only, as a server without protobuf says
    assert apps_url.startswith("/clusters/prod/openapi/v3/apis/apps/v1?hash=")
    assert apps_v3["openapi"] == "3.0.0"
    schemas = apps_v3["components"]["schemas"]
    assert schemas["io.k8s.api.apps.v1.DaemonSetSpec"]["properties"]["selector"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"}
    ]
    patch = apps_v3["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]


def test_a_deployment_scales_through_its_scale_subresource(apps: AppsV1Api) -> None:
    deployment = {**a_daemonset("web"), "kind": "Deployment"}
    apps.create_namespaced_deployment("default", deployment)

    before = apps.read_namespaced_deployment_scale("web", "default")
    apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 4}})
    with pytest.raises(ApiException) as negative:
        apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": -1}})
    read = apps.read_namespaced_deployment("web", "default")

    assert (before.spec.replicas, before.status.selector) == (1, "app=web")
    assert (read.spec.replicas, read.status.available_replicas) == (4, 4)
    assert read.status.observed_generation == read.metadata.generation == 2
    assert negative.value.status == 422
