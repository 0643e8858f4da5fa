"""Watch, as the official client's `watch.Watch().stream(...)` uses it: list, then watch
from the list's resourceVersion; selectors; `timeoutSeconds`; bookmarks; 410 Expired
for a resourceVersion the bounded history no longer holds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from kubernetes import watch
from kubernetes.client import ApiException, CoreV1Api

from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object


def later(action: Callable[[], Any], delay: float = 0.5) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), action()), daemon=True)
    thread.start()
    return thread


def a_pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def test_a_watch_from_the_lists_resource_version_sees_what_changed_after_it(
    core: CoreV1Api,
) -> None:
    core.create_namespaced_pod("default", a_pod("before"))
    listed = core.list_namespaced_pod("default")
    later(lambda: core.create_namespaced_pod("default", a_pod("after")))
    later(lambda: core.delete_namespaced_pod("before", "default"), delay=0.8)

    seen = []
    watcher = watch.Watch()
    for event in watcher.stream(
        core.list_namespaced_pod,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=10,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            watcher.stop()

    assert seen == [("ADDED", "after"), ("DELETED", "before")]


def test_a_watch_without_a_resource_version_starts_with_every_object_and_follows_selectors(
    core: CoreV1Api,
) -> None:
    core.create_namespaced_pod("default", a_pod("web-1", app="web"))
    core.create_namespaced_pod("default", a_pod("db-1", app="db"))

    def relabel() -> None:
        core.patch_namespaced_pod("web-1", "default", {"metadata": {"labels": {"app": "old"}}})
        core.patch_namespaced_pod("db-1", "default", {"metadata": {"labels": {"app": "web"}}})

    later(relabel)
    seen = []
    watcher = watch.Watch()
    for event in watcher.stream(
        core.list_namespaced_pod, "default", label_selector="app=web", timeout_seconds=10
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 3:
            watcher.stop()

    # Leaving the selection is DELETED, entering it ADDED, as the real server says.
    assert seen == [("ADDED", "web-1"), ("DELETED", "web-1"), ("ADDED", "db-1")]


def test_a_watch_ends_after_timeout_seconds(core: CoreV1Api) -> None:
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_node, resource_version="1", timeout_seconds=1))

    assert events == []
    assert 0.9 <= time.monotonic() - started < 5


def test_a_quiet_watch_gets_bookmarks_with_the_current_resource_version(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    kube_sim.configure(bookmark_interval_seconds=0.3)
    kube_sim.put("prod", node_object("n1"))
    current = core.list_node().metadata.resource_version

    marks = [
        event
        for event in watch.Watch().stream(
            core.list_node,
            resource_version=current,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
        if event["type"] == "BOOKMARK"
    ]

    assert marks
    assert marks[-1]["raw_object"]["metadata"] == {"resourceVersion": current}


def test_a_resource_version_older_than_the_history_is_410_expired(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    kube_sim.configure(watch_history=3)
    first = core.create_namespaced_pod("default", a_pod("p0")).metadata.resource_version
    for index in range(1, 6):
        core.create_namespaced_pod("default", a_pod(f"p{index}"))

    with pytest.raises(ApiException) as expired:
        for _ in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=first):
            pass

    assert expired.value.status == 410
    assert "too old resource version" in str(expired.value.reason)


def test_compaction_expires_watches_as_etcd_does(
    cluster: SimCluster, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", pod_object("p1"))
    old = kube_sim.put("prod", pod_object("p2"))
    kube_sim.put("prod", pod_object("p3"))
    kube_sim.compact("prod")

    answer = requests.get(
        f"{cluster.server}/api/v1/pods",
        params={"watch": "true", "resourceVersion": old},
        headers={"Authorization": f"Bearer {cluster.token}"},
        timeout=5,
        verify=cluster.ca_file,
    )

    # As the watch cache: 200, then one ERROR event carrying the 410 Status.
    assert answer.status_code == 200
    event = answer.json()
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_watches_end_when_the_simulator_is_reset(
    cluster: SimCluster, kube_sim: KubeSimulator
) -> None:
    later(kube_sim.reset)
    started = time.monotonic()
    answer = requests.get(
        f"{cluster.server}/api/v1/nodes",
        params={"watch": "1", "resourceVersion": "1"},
        headers={"Authorization": f"Bearer {cluster.token}"},
        timeout=10,
        verify=cluster.ca_file,
    )

    assert answer.status_code == 200 and answer.text == ""
    assert time.monotonic() - started < 5
