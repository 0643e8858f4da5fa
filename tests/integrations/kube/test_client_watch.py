"""The client's watches against the fake API server over HTTP, read by the official
client's `kubernetes.watch.Watch`: events typed as listings are, bookmarks that move the
resourceVersion, 410 Gone as Expired (an ERROR event, or the HTTP answer), and a stop
from another thread that ends a quiet watch at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from capvco_web.integrations import kube
from capvco_web.integrations.kube.client import KubeClient
from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object


@pytest.fixture
def cluster(kube_sim: KubeSimulator) -> SimCluster:
    found = kube_sim.cluster("prod")
    kube_sim.put("prod", node_object("node-0"), pod_object("before", node="node-0"))
    return found


@pytest.fixture
def client(cluster: SimCluster) -> Iterator[KubeClient]:
    with KubeClient.from_text(
        cluster.kubeconfig_yaml, allowed_servers=cluster.allowed_servers(), timeout=(1.0, 0.5)
    ) as found:
        yield found


def later(action: object, delay: float = 0.3) -> None:
    def run() -> None:
        time.sleep(delay)
        action()  # type: ignore[operator]

    threading.Thread(target=run, daemon=True).start()


def test_a_watch_from_a_listing_sees_each_change_after_it_then_bookmarks(
    client: KubeClient, kube_sim: KubeSimulator, cluster: SimCluster
) -> None:
    kube_sim.configure(bookmark_interval_seconds=0.3)
    listed = client.list_pods()
    later(lambda: kube_sim.put("prod", pod_object("after", node="node-0", gpus=1)))

    events = list(client.watch_pods(resource_version=listed.resource_version, timeout_seconds=2))

    [added] = [e for e in events if e.type == "ADDED"]
    assert isinstance(added.object, kube.Pod)
    assert (added.object.name, added.object.gpu_requests) == ("after", 1)
    assert int(added.resource_version) > int(listed.resource_version)
    bookmarks = [e for e in events if e.type == "BOOKMARK"]
    assert bookmarks and all(e.object is None for e in bookmarks)
    # A bookmark carries the resourceVersion the watch has reached: where the next resumes.
    assert bookmarks[-1].resource_version == added.resource_version
    watches = [c for c in kube_sim.calls("prod") if c["operation"] == "watch pods"]
    assert [c["query"]["allowWatchBookmarks"] for c in watches] == ["true"]
    assert watches[0]["query"]["timeoutSeconds"] == "2"


def test_a_deleted_node_is_an_event_with_the_node_as_it_was(
    client: KubeClient, kube_sim: KubeSimulator, cluster: SimCluster
) -> None:
    listed = client.list_nodes()
    later(lambda: kube_sim.put("prod", node_object("node-1")))
    stream = client.watch_nodes(resource_version=listed.resource_version, timeout_seconds=3)
    seen = []
    for event in stream:
        seen.append((event.type, event.object.name if event.object else None))
        if event.type == "ADDED":
            client._core.delete_node("node-1")
        if event.type == "DELETED":
            stream.stop()

    assert seen == [("ADDED", "node-1"), ("DELETED", "node-1")]


def test_a_resource_version_the_history_no_longer_holds_is_expired(
    client: KubeClient, kube_sim: KubeSimulator, cluster: SimCluster
) -> None:
    listed = client.list_pods()
    kube_sim.put("prod", pod_object("after"))
    kube_sim.compact("prod")

    with pytest.raises(kube.Expired) as raised:
        list(client.watch_pods(resource_version=listed.resource_version, timeout_seconds=2))

    assert (raised.value.status, raised.value.operation) == (410, "watch pods")


@pytest.mark.parametrize(
    ("status", "error"), [(410, kube.Expired), (503, kube.ServerError), (401, kube.Unauthorized)]
)
def test_a_watch_answered_with_an_error_status_is_a_typed_error(
    client: KubeClient,
    kube_sim: KubeSimulator,
    cluster: SimCluster,
    status: int,
    error: type[kube.KubeError],
) -> None:
    kube_sim.fault(operation="watch pods", status=status)

    with pytest.raises(error) as raised:
        list(client.watch_pods(resource_version="1", timeout_seconds=2))

    assert raised.value.status == status


def test_stop_from_another_thread_ends_a_quiet_watch_at_once(
    client: KubeClient, cluster: SimCluster
) -> None:
    listed = client.list_pods()
    stream = client.watch_pods(resource_version=listed.resource_version, timeout_seconds=30)
    later(stream.stop)
    began = time.monotonic()

    assert list(stream) == []

    assert time.monotonic() - began < 3
