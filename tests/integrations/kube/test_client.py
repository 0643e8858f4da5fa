"""The Kubernetes client against the fake API server over HTTP: listings in pages that say
whether they completed, every failure as a typed error, and nothing read or left behind
in the process's own Kubernetes configuration."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes.client import Configuration

from capvco_web.integrations import kube
from capvco_web.integrations.kube import AllowedServers
from capvco_web.integrations.kube.client import KubeClient
from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object


def allowing(cluster: SimCluster) -> AllowedServers:
    """An allow-list of the simulator's origin alone (http or https, as it serves)."""
    parts = urlsplit(cluster.server)
    return AllowedServers([f"{parts.scheme}://{parts.netloc}"])


@pytest.fixture
def cluster(kube_sim: KubeSimulator) -> SimCluster:
    found = kube_sim.cluster("prod")
    kube_sim.put(
        "prod",
        *[node_object(f"node-{i}", gpus=i % 2) for i in range(5)],
        *[pod_object(f"pod-{i}", node=f"node-{i % 5}", gpus=1) for i in range(7)],
    )
    return found


@pytest.fixture
def client(cluster: SimCluster) -> Iterator[KubeClient]:
    with KubeClient.from_text(
        cluster.kubeconfig_yaml, allowed_servers=allowing(cluster), page_size=2, timeout=(1.0, 0.5)
    ) as found:
        yield found


def test_a_listing_reads_every_page_of_one_snapshot(
    client: KubeClient, kube_sim: KubeSimulator
) -> None:
    nodes = client.list_nodes()
    pods = client.list_pods()

    assert (nodes.complete, nodes.error, nodes.calls) == (True, None, 3)
    assert [n.name for n in nodes.items] == [f"node-{i}" for i in range(5)]
    assert nodes.items[1].gpu_capacity == 1 and nodes.items[0].ready
    assert (pods.complete, len(pods.items), pods.calls) == (True, 7, 4)
    assert nodes.resource_version == pods.resource_version != ""
    kube_sim.put("prod", node_object("node-9"))
    assert client.list_nodes().resource_version != nodes.resource_version


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        ({"status": 503}, kube.ServerError, 503),
        ({"status": 410}, kube.Expired, 410),
        ({"status": 429, "retry_after": 7}, kube.TooManyRequests, 429),
        ({"latency_ms": 1200}, kube.Timeout, None),
        ({"lost_response": "truncate"}, kube.Unreachable, None),
        # Dropped before any answer: sent again once (a pooled connection may have been
        # dropped while idle), dropped again.
        ({"lost_response": "drop", "times": 2}, kube.Unreachable, None),
    ],
    ids=["5xx", "expired", "429", "timeout", "cut-short", "dropped"],
)
def test_a_page_that_fails_ends_the_listing_incomplete_with_what_was_read(
    client: KubeClient,
    kube_sim: KubeSimulator,
    fault: dict[str, object],
    error: type[kube.KubeError],
    status: int | None,
) -> None:
    kube_sim.fault(operation="list pods", skip=2, **{"times": 1, **fault})

    listing = client.list_pods()

    assert not listing.complete
    assert [p.name for p in listing.items] == ["pod-0", "pod-1", "pod-2", "pod-3"]
    assert isinstance(listing.error, error) and listing.error.status == status
    assert listing.error.retryable
    assert listing.error.operation == "list pods"
    if isinstance(listing.error, kube.TooManyRequests):
        assert listing.error.retry_after == 7
    assert client.list_pods().complete  # the fault fired once


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, kube.Unauthorized), (403, kube.Forbidden), (404, kube.NotFound), (409, kube.Conflict)],
)
def test_refusals_are_typed_and_not_retryable(
    client: KubeClient, kube_sim: KubeSimulator, status: int, error: type[kube.KubeError]
) -> None:
    kube_sim.fault(operation="list nodes", status=status)

    listing = client.list_nodes()

    assert isinstance(listing.error, error) and not listing.error.retryable
    assert (listing.complete, listing.items, listing.calls) == (False, (), 1)


def test_a_refused_token_is_unauthorized(cluster: SimCluster) -> None:
    config = yaml.safe_load(cluster.kubeconfig_yaml)
    config["users"][0]["user"]["token"] = "not-the-token"
    with KubeClient.from_text(yaml.safe_dump(config), allowed_servers=allowing(cluster)) as client:
        error = client.list_nodes().error
    assert isinstance(error, kube.Unauthorized) and error.message == "Unauthorized"


def test_a_kind_the_cluster_does_not_serve_is_not_found(client: KubeClient) -> None:
    listing = client.list_custom_objects(
        group="cluster.x-k8s.io", version="v1beta1", plural="clusters"
    )
    assert isinstance(listing.error, kube.NotFound)


def test_custom_objects_are_listed_as_the_api_answers_them(
    client: KubeClient, kube_sim: KubeSimulator
) -> None:
    kube_sim.register(
        "prod", group="cluster.x-k8s.io", version="v1beta1", plural="machinedeployments",
        kind="MachineDeployment", namespaced=True,
    )  # fmt: skip
    kube_sim.put(
        "prod",
        *[
            {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "MachineDeployment",
                "metadata": {"name": f"md-{i}", "namespace": ns},
                "spec": {"replicas": i},
            }
            for i, ns in enumerate(["a", "b", "c"])
        ],
    )
    listing = client.list_custom_objects(
        group="cluster.x-k8s.io", version="v1beta1", plural="machinedeployments"
    )
    assert listing.complete and [o["spec"]["replicas"] for o in listing.items] == [0, 1, 2]


def test_an_api_server_nobody_listens_on_is_unreachable(cluster: SimCluster) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free, and closed again below
    config = yaml.safe_load(cluster.kubeconfig_yaml)
    config["clusters"][0]["cluster"]["server"] = server = f"http://127.0.0.1:{port}"
    with KubeClient.from_text(
        yaml.safe_dump(config), allowed_servers=AllowedServers([server])
    ) as client:
        error = client.list_nodes().error
    assert isinstance(error, kube.Unreachable) and error.retryable


def test_the_process_kubernetes_configuration_is_neither_read_nor_changed(
    cluster: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kubeconfig in the usual places, pointing elsewhere: it must not be what is used.
    decoy = tmp_path / "config"
    decoy.write_text(cluster.kubeconfig_yaml.replace("127.0.0.1", "198.51.100.1"))
    monkeypatch.setenv("KUBECONFIG", str(decoy))
    monkeypatch.setenv("HOME", str(tmp_path))
    default_before = Configuration._default

    with KubeClient.from_text(cluster.kubeconfig_yaml, allowed_servers=allowing(cluster)) as client:
        assert client.list_nodes().complete

    assert Configuration._default is default_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config"]  # no ~/.kube made


def test_node_labels_are_set_and_removed_with_one_merge_patch(
    client: KubeClient, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", node_object("node-9", labels={"team": "ml", "old": "x"}))
    kube_sim.clear_calls()

    node = client.patch_node_labels("node-9", {"capvco.io/gpu-type": "nvidia-a100", "old": None})

    assert node.labels == {
        "kubernetes.io/hostname": "node-9", "team": "ml", "capvco.io/gpu-type": "nvidia-a100",
    }  # fmt: skip
    assert [(c["operation"], c["status"]) for c in kube_sim.calls()] == [("patch nodes", 200)]
    with pytest.raises(kube.NotFound):
        client.patch_node_labels("node-gone", {"a": "b"})


def test_a_daemonset_is_read_created_replaced_and_deleted_as_plain_json(
    client: KubeClient,
) -> None:
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system", "annotations": {"v": "1"}},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1"}]},
            },
        },
    }
    assert client.read_daemonset("kube-system", "agent") is None

    created = client.create_daemonset("kube-system", body)
    with pytest.raises(kube.Conflict) as twice:
        client.create_daemonset("kube-system", body)
    changed = {**body, "metadata": {**body["metadata"], "annotations": {"v": "2"}}}
    stale = {**changed, "metadata": {**changed["metadata"], "resourceVersion": "1"}}
    with pytest.raises(kube.Conflict):
        client.replace_daemonset("kube-system", "agent", stale)
    replaced = client.replace_daemonset("kube-system", "agent", changed)
    read = client.read_daemonset("kube-system", "agent")
    client.delete_daemonset("kube-system", "agent")

    assert twice.value.reason == "AlreadyExists"
    assert created["metadata"]["uid"] == replaced["metadata"]["uid"]
    assert read is not None and read["metadata"]["annotations"] == {"v": "2"}
    assert client.read_daemonset("kube-system", "agent") is None
    with pytest.raises(kube.NotFound):
        client.delete_daemonset("kube-system", "agent")


def test_a_write_whose_answer_is_lost_is_an_error_that_may_have_acted(
    client: KubeClient, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", node_object("node-9"))
    kube_sim.fault(operation="patch nodes", lost_response="drop", times=1)

    with pytest.raises(kube.Unreachable):
        client.patch_node_labels("node-9", {"gpu": "t4"})

    assert client.list_nodes().items[-1].labels["gpu"] == "t4"
