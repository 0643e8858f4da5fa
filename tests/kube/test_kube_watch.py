"""The watch process: each cluster's nodes and pods listed once and kept current by watch
against the fake Kubernetes API over HTTP; a deletion decided from an unbroken watch or
a fresh complete listing only; the beat pass that skips what a fresh watch keeps; new,
changed and removed clusters picked up; a stop on SIGTERM.

The watch threads write through their own database connections: these tests commit."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from django.db import connection, transaction
from django.utils import timezone

from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from kube import watch as kube_watch
from kube.client import kube_client
from kube.models import KubeNode, KubePod, KubeWatch
from kube.observe import cluster_kube_observe
from kube.watch import KubeWatcher, KubeWatchProcess
from tests.e2e.processes import ROOT, environment_for_subprocess
from tests.factories import kube_observation_of
from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object

pytestmark = pytest.mark.django_db(transaction=True)

GPU_0 = "capvco-prod-gpu-0"


@pytest.fixture
def sim_cluster(kube_sim: KubeSimulator, pool: MachinePool, settings: Any) -> SimCluster:
    """Cluster `prod` with the kubeconfig of a fake API server, two pods on one node."""
    settings.KUBE_LIST_PAGE_SIZE = 2  # every listing here takes several pages
    settings.KUBE_READ_TIMEOUT = 1.0
    kube_sim.configure(bookmark_interval_seconds=0.2)
    found = kube_sim.cluster("prod")
    kube_sim.put(
        "prod",
        node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1),
        pod_object("job-0", node=GPU_0, gpus=1),
        pod_object("job-1", node=GPU_0),
    )
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)
    return found


@pytest.fixture
def core(sim_cluster: SimCluster) -> kubernetes.client.CoreV1Api:
    """The official client, as another actor (kubectl, a controller) would use it."""
    return kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config_dict(sim_cluster.kubeconfig)
    )


@pytest.fixture
def watching(sim_cluster: SimCluster, pool: MachinePool) -> Iterator[Callable[[str], KubeWatcher]]:
    """Start the watch of one kind of cluster `prod`; stopped at the end."""
    started: list[KubeWatcher] = []

    def start(kind: str) -> KubeWatcher:
        watcher = KubeWatcher(cluster_id=pool.cluster_id, cluster_name="prod", kind=kind)
        started.append(watcher)
        watcher.start()
        eventually(lambda: stamp(kind) is not None, what=f"the {kind} listing mirrored")
        return watcher

    yield start
    for watcher in started:
        watcher.stop()
    for watcher in started:
        watcher.join(10)
        assert not watcher.is_alive()


def eventually(check: Callable[[], Any], *, what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def stamp(kind: str) -> Any:
    return KubeWatch.objects.filter(kind=kind).values_list("watched_at", flat=True).first()


def pod_names() -> set[str]:
    return set(KubePod.objects.values_list("name", flat=True))


def listings(sim: KubeSimulator, operation: str) -> int:
    """Listings made (their first pages: a listing of several pages is one)."""
    return sum(
        1 for c in sim.calls("prod") if c["operation"] == operation and "continue" not in c["query"]
    )


def test_pods_created_changed_and_deleted_show_through_the_watch_without_another_listing(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, watching: Any
) -> None:
    watching("pods")
    assert pod_names() == {"job-0", "job-1"}
    listed_at = stamp("pods")

    kube_sim.put(
        "prod",
        pod_object(
            "new", namespace="team-a", node=GPU_0, sriov_network="ext-1", labels={"team": "ml"}
        ),
    )
    new = eventually(lambda: KubePod.objects.filter(name="new").first(), what="the new pod")
    assert (new.namespace, new.node_name, new.sriov_network) == ("team-a", GPU_0, "ext-1")
    assert new.labels == {"team": "ml"}
    # A label changed by another client (kubectl label) comes through the watch too.
    core.patch_namespaced_pod("new", "team-a", {"metadata": {"labels": {"team": "infer"}}})
    eventually(
        lambda: KubePod.objects.filter(name="new", labels={"team": "infer"}).exists(),
        what="the pod's new label",
    )
    core.patch_namespaced_pod_status("job-0", "default", {"status": {"phase": "Succeeded"}})
    eventually(
        lambda: KubePod.objects.filter(name="job-0", phase="Succeeded").exists(),
        what="the pod's new phase",
    )
    core.delete_namespaced_pod("job-1", "default")
    eventually(lambda: pod_names() == {"job-0", "new"}, what="the deleted pod gone")

    assert listings(kube_sim, "list pods") == 1
    assert listings(kube_sim, "watch pods") >= 1
    # Bookmarks every 0.2 s and events moved the watch on; the stamp is written at most
    # every STAMP_EVERY_SECONDS, not per bookmark or event.
    assert stamp("pods") == listed_at


def test_nodes_are_watched_by_name_and_a_replacement_is_seen_first_anew(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, watching: Any
) -> None:
    watching("nodes")
    first_seen = KubeNode.objects.get(name=GPU_0).first_seen_at

    kube_sim.put("prod", node_object("capvco-prod-gpu-1", gpus=1, allocatable_gpus=0))
    eventually(lambda: KubeNode.objects.filter(name="capvco-prod-gpu-1").exists(), what="a node")
    core.delete_node(GPU_0)
    eventually(lambda: not KubeNode.objects.filter(name=GPU_0).exists(), what="the node gone")
    kube_sim.put("prod", node_object(GPU_0, gpus=1))
    again = eventually(lambda: KubeNode.objects.filter(name=GPU_0).first(), what="it back")

    assert again.first_seen_at > first_seen
    assert listings(kube_sim, "list nodes") == 1


def test_a_410_lists_again_and_ends_consistent(
    kube_sim: KubeSimulator, watching: Any, caplog: pytest.LogCaptureFixture
) -> None:
    watching("pods")
    # Two writes at once where the history keeps one: the watch's resourceVersion is gone.
    kube_sim.configure(watch_history=1)
    caplog.set_level(logging.INFO, logger="kube.watch")

    kube_sim.put("prod", pod_object("burst-0"), pod_object("burst-1"))

    eventually(lambda: listings(kube_sim, "list pods") == 2, what="a second listing")
    eventually(lambda: pod_names() == {"job-0", "job-1", "burst-0", "burst-1"}, what="both pods")
    assert "watch pods of prod: expired (410), listing again" in caplog.messages


def test_a_pod_deleted_while_the_watch_is_broken_is_removed_only_by_the_next_listing(
    kube_sim: KubeSimulator,
    core: kubernetes.client.CoreV1Api,
    watching: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_watch, "BACKOFF_SECONDS", 0.2)
    watching("pods")
    kube_sim.fault(operation="list pods", status=503)  # the listing after the break fails
    kube_sim.configure(watch_history=1)
    kube_sim.put("prod", node_object("other-1"), node_object("other-2"))  # a 410 for pods
    eventually(lambda: stamp("pods") is None, what="the stamp cleared: not current")

    core.delete_namespaced_pod("job-1", "default")
    time.sleep(1.0)  # several listings failed meanwhile; no watch is running

    assert pod_names() == {"job-0", "job-1"}  # nothing decided without a complete listing
    kube_sim.clear_faults()
    eventually(lambda: pod_names() == {"job-0"}, what="the pod removed by the listing")
    eventually(lambda: stamp("pods") is not None, what="the stamp back")


def test_the_watch_lists_again_every_resync_period(
    kube_sim: KubeSimulator, watching: Any, settings: Any
) -> None:
    settings.KUBE_RESYNC_SECONDS = 1  # below what KUBE_RESYNC_SECONDS accepts, for the test

    watching("pods")

    eventually(lambda: listings(kube_sim, "list pods") >= 3, what="listings a second apart")
    watches = [c for c in kube_sim.calls("prod") if c["operation"] == "watch pods"]
    # A watch request lasts at most until the resync is due.
    assert watches and all(c["query"]["timeoutSeconds"] == "1" for c in watches)


def test_a_stopped_watch_clears_its_stamp(watching: Any) -> None:
    watcher = watching("pods")

    watcher.stop()
    watcher.join(5)

    assert not watcher.is_alive()
    assert stamp("pods") is None


def observe(pool: MachinePool) -> Any:
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        return cluster_kube_observe(client=client, cluster=cluster)


def test_the_beat_pass_skips_a_kind_while_its_watch_stamp_is_fresh_and_lists_it_when_stale(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool
) -> None:
    observe(pool)
    watched_at = timezone.now() - timedelta(seconds=KubeWatch.WATCH_TIMEOUT_SECONDS)
    KubeWatch.objects.create(cluster_id=pool.cluster_id, kind="pods", watched_at=watched_at)
    kube_sim.put("prod", pod_object("only-listed"))
    kube_sim.clear_calls()

    skipped = observe(pool)

    assert skipped.watched == ["pods"] and skipped.complete
    assert {c["operation"] for c in kube_sim.calls("prod")} == {"list nodes"}
    assert pod_names() == {"job-0", "job-1"}  # the watch's rows, none dropped nor added
    # Complete as of the watch's stamp, which stands for when the pods' listing began.
    assert kube_observation_of(pool.cluster_id).last_complete_at == watched_at

    stale = timezone.now() - timedelta(seconds=2 * KubeWatch.WATCH_TIMEOUT_SECONDS + 1)
    KubeWatch.objects.filter(kind="pods").update(watched_at=stale)
    listed = observe(pool)

    assert listed.watched == [] and listed.complete
    assert "only-listed" in pod_names()


def test_the_process_follows_new_changed_and_removed_clusters_and_logs_a_failure_once(
    kube_sim: KubeSimulator,
    sim_cluster: SimCluster,
    pool: MachinePool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(kube_watch, "BACKOFF_SECONDS", 0.1)
    process = KubeWatchProcess()
    try:
        process.poll()
        assert sorted(k for _, k in process.watchers) == ["nodes", "pods"]
        eventually(lambda: stamp("nodes") and stamp("pods"), what="both kinds watched")
        first = dict(process.watchers)

        refused = {**sim_cluster.kubeconfig}
        refused["users"] = [{"name": u["name"], "user": {"token": "not-the-token"}} for u in
                            sim_cluster.kubeconfig["users"]]  # fmt: skip
        Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=yaml.safe_dump(refused))
        process.poll()
        assert all(process.watchers[key] is not first[key] for key in first)
        failing = process.watchers[(pool.cluster_id, "pods")]
        eventually(lambda: failing.failures >= 3, what="several failures in a row")
        assert failing.backoff() >= 0.4  # doubled per failure
        warnings = [r.getMessage() for r in caplog.records if r.name == "kube.watch"]
        assert [m for m in warnings if m.startswith("watch pods of prod")] == [
            "watch pods of prod: list pods: HTTP 401: Unauthorized"
        ]
        assert not any("not-the-token" in m for m in caplog.messages)
        assert stamp("pods") is None  # the beat pass lists it meanwhile

        Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig="")
        process.poll()
        assert process.watchers == {}
    finally:
        process.shutdown()


def test_the_process_stops_on_sigterm_and_clears_its_stamps(
    sim_cluster: SimCluster, tmp_path: Path
) -> None:
    log = (tmp_path / "kube-watch.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "kube_watch"],
        cwd=ROOT,
        env=environment_for_subprocess(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        eventually(lambda: stamp("nodes") and stamp("pods"), what="both kinds watched", timeout=30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert stamp("nodes") is None and stamp("pods") is None
    assert "kube watch: stopped" in (tmp_path / "kube-watch.log").read_text()


def test_a_cluster_deleted_while_its_watch_writes_ends_the_watch_quietly(
    kube_sim: KubeSimulator,
    watching: Any,
    pool: MachinePool,
    caplog: pytest.LogCaptureFixture,
    require_postgres: None,
) -> None:
    """The cluster's rows are deleted (not committed yet) as an event comes: the watch's
    write waits for the deletion, then finds the cluster gone and ends, writing nothing
    and saying nothing is wrong. (Before, it wrote rows naming a cluster being deleted, met
    the foreign key at its commit and logged that as a failure of the watch.)"""
    watcher = watching("pods")
    cluster_id = pool.cluster_id
    deleted, commit = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def delete() -> None:  # a transaction of its own, as cluster_rows_delete's
        try:
            with transaction.atomic():
                Machine.objects.filter(pool__cluster_id=cluster_id).delete()  # torn down
                MachinePool.objects.filter(cluster_id=cluster_id).delete()
                ClusterSite.objects.filter(cluster_id=cluster_id).delete()
                Cluster.objects.filter(pk=cluster_id).delete()
                deleted.set()
                commit.wait(10)
        except BaseException as exc:
            failed.append(exc)
        finally:
            connection.close()

    deleter = threading.Thread(target=delete)
    with caplog.at_level(logging.INFO, logger="kube.watch"):
        deleter.start()
        assert deleted.wait(10), failed
        kube_sim.put("prod", pod_object("late", node=GPU_0))
        time.sleep(1.0)  # the event has come: its write waits on the deletion
        commit.set()
        deleter.join(10)
        watcher.join(10)

    assert not watcher.is_alive()  # ended by itself: its cluster is gone
    assert not KubePod.objects.filter(cluster_id=cluster_id).exists()
    assert not KubeWatch.objects.filter(cluster_id=cluster_id).exists()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [], said
