"""Observe a workload cluster's Kubernetes: nodes and pods mirrored, nodes linked to
machines, flags raised only from complete listings; the official client against the fake
API server over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import kubernetes
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from capvco_web.audit import SystemActor
from cloud.services import InUse
from clusters.models import Cluster, Machine, MachinePool
from clusters.selectors import kube_observed
from clusters.services import cluster_rows_delete, machine_force_delete
from kube.client import kube_client
from kube.models import ClusterObservation, KubeNode, KubePod, MachineNode
from kube.nodes import NodeOwners
from kube.observe import KubeObservationResult, cluster_kube_observe
from kube.tasks import observe_cluster_kube
from tests.gpus.test_lifecycle_regressions import backend_pid, until, waits_on_a_lock
from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object

GPU_0, GPU_1 = "capvco-prod-gpu-0", "capvco-prod-gpu-1"  # the VM names of the pool's machines

Observe = Callable[[], KubeObservationResult]


@pytest.fixture
def sim_cluster(kube_sim: KubeSimulator, pool: MachinePool, settings: Any) -> SimCluster:
    """Cluster `prod` (pool `gpu`, machines gpu-0 and gpu-1 on VMs 100 and 101 in nl-1)
    with the kubeconfig of a fake API server."""
    settings.KUBE_LIST_PAGE_SIZE = 2  # every listing here takes several pages
    settings.KUBE_READ_TIMEOUT = 1.0
    found = kube_sim.cluster("prod")
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)
    return found


@pytest.fixture
def observe(sim_cluster: SimCluster, pool: MachinePool) -> Observe:
    def run() -> KubeObservationResult:
        cluster = Cluster.objects.get(pk=pool.cluster_id)
        with kube_client(cluster) as client:
            return cluster_kube_observe(client=client, cluster=cluster)

    return run


@pytest.fixture
def core(sim_cluster: SimCluster) -> kubernetes.client.CoreV1Api:
    """The official client, as another actor (kubectl, the kubelet) would use it."""
    api = kubernetes.config.new_client_from_config_dict(sim_cluster.kubeconfig)
    return kubernetes.client.CoreV1Api(api)


def seed(kube_sim: KubeSimulator, *, pods_per_node: int = 2) -> None:
    """Both machines' nodes (one by providerID, one by name) with GPU pods."""
    kube_sim.put(
        "prod",
        node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1),
        node_object(GPU_1, gpus=1, allocatable_gpus=0),
        *[
            pod_object(f"job-{node[-1]}-{i}", node=node, gpus=1 if i == 0 else 0)
            for node in (GPU_0, GPU_1)
            for i in range(pods_per_node)
        ],
    )


def sql_writes(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"].split(" SET ")[0].split(" (")[0]
        for q in queries.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))
    ]


def node_flags(machine: str) -> MachineNode:
    """The machine's node flags as the observer left them (unsaved defaults: no row)."""
    row = MachineNode.objects.filter(machine__name=machine).first()
    return row or MachineNode(machine=Machine.objects.get(name=machine))


def started(machine: str, minutes_ago: float) -> None:
    Machine.objects.filter(name=machine).update(
        vm_started_at=timezone.now() - timedelta(minutes=minutes_ago)
    )


def test_nodes_and_pods_are_mirrored_with_their_gpus_sriov_network_and_labels(
    kube_sim: KubeSimulator, observe: Observe
) -> None:
    seed(kube_sim)
    labels = {"team": "ml", "app.kubernetes.io/name": "trainer"}
    kube_sim.put(
        "prod",
        pod_object("nic", namespace="team-a", node=GPU_0, sriov_network="ext-101", labels=labels),
        pod_object("waiting", namespace="team-a", phase="Pending", gpus=2),
    )

    result = observe()

    assert result.complete and result.errors == []
    nodes = {n.name: n for n in KubeNode.objects.all()}
    assert (nodes[GPU_0].gpu_capacity, nodes[GPU_0].gpu_allocatable, nodes[GPU_0].ready) == (
        1, 1, True,
    )  # fmt: skip
    assert (nodes[GPU_1].gpu_capacity, nodes[GPU_1].gpu_allocatable) == (1, 0)
    assert nodes[GPU_0].provider_id == "vco://nl-1/100"
    assert nodes[GPU_0].kubelet_version == "v1.33.1"
    assert nodes[GPU_0].labels["kubernetes.io/hostname"] == GPU_0
    pods = {(p.namespace, p.name): p for p in KubePod.objects.all()}
    assert len(pods) == 6
    assert (pods[("default", "job-0-0")].node_name, pods[("default", "job-0-0")].gpu_requests) == (
        GPU_0, 1,
    )  # fmt: skip
    assert pods[("team-a", "nic")].sriov_network == "ext-101"
    # Its labels, not its annotations (the SR-IOV one is read, not kept whole).
    assert pods[("team-a", "nic")].labels == labels
    waiting = pods[("team-a", "waiting")]
    assert (waiting.node_name, waiting.phase, waiting.gpu_requests) == ("", "Pending", 2)
    observation = ClusterObservation.objects.get(cluster__name="prod")
    assert observation.complete
    assert observation.last_complete_at == observation.started_at


def test_a_second_observe_of_an_unchanged_cluster_writes_nothing_but_its_stamp(
    kube_sim: KubeSimulator, observe: Observe
) -> None:
    seed(kube_sim, pods_per_node=3)
    started("gpu-0", minutes_ago=30)
    observe()
    kube_sim.clear_calls()

    with CaptureQueriesContext(connection) as queries:
        result = observe()

    assert (result.complete, result.writes, result.unchanged) == (True, 0, ["nodes", "pods"])
    assert sql_writes(queries) == ['UPDATE "kube_clusterobservation"']
    # One node listing (2 nodes: one page of 2) and one pod listing (6 pods: 3 pages).
    operations = [c["operation"] for c in kube_sim.calls("prod")]
    assert operations == ["list nodes"] + ["list pods"] * 3


def test_a_new_kubeconfig_compares_the_listings_afresh(
    kube_sim: KubeSimulator, observe: Observe, sim_cluster: SimCluster, pool: MachinePool
) -> None:
    seed(kube_sim)
    observe()
    # Another kubeconfig may reach another cluster: nothing says that the resourceVersions
    # mirrored are of the cluster it reaches.
    Cluster.objects.filter(pk=pool.cluster_id).update(
        kubeconfig=sim_cluster.kubeconfig_yaml + "\n# another user's\n"
    )

    assert observe().unchanged == []
    assert observe().unchanged == ["nodes", "pods"]


def test_a_change_to_fields_not_mirrored_writes_no_row(
    kube_sim: KubeSimulator, observe: Observe, core: kubernetes.client.CoreV1Api
) -> None:
    seed(kube_sim)
    observe()
    # The kubelet's heartbeat and annotations move the resourceVersion, not what we keep.
    core.patch_node(GPU_0, {"metadata": {"annotations": {"heartbeat": "2"}}})
    core.patch_namespaced_pod("job-0-0", "default", {"metadata": {"annotations": {"a": "b"}}})

    with CaptureQueriesContext(connection) as queries:
        result = observe()

    assert result.unchanged == []  # the listings were compared
    assert result.writes == 0
    assert sql_writes(queries) == ['UPDATE "kube_clusterobservation"']


def test_changes_are_mirrored_and_a_vanished_node_and_pod_are_removed(
    kube_sim: KubeSimulator, observe: Observe, core: kubernetes.client.CoreV1Api
) -> None:
    seed(kube_sim)
    observe()
    core.delete_node(GPU_1)
    core.delete_namespaced_pod("job-1-0", "default")
    core.patch_node(GPU_0, {"metadata": {"labels": {"capvco.io/gpu-type": "nvidia-a100"}}})
    core.patch_namespaced_pod_status("job-0-0", "default", {"status": {"phase": "Succeeded"}})
    core.patch_namespaced_pod("job-0-1", "default", {"metadata": {"labels": {"team": "ml"}}})

    result = observe()

    assert result.complete
    assert sorted(KubeNode.objects.values_list("name", flat=True)) == [GPU_0]
    assert not KubePod.objects.filter(name="job-1-0").exists()
    assert KubePod.objects.get(name="job-0-0").phase == "Succeeded"
    assert KubePod.objects.get(name="job-0-1").labels == {"team": "ml"}
    assert KubeNode.objects.get(name=GPU_0).labels["capvco.io/gpu-type"] == "nvidia-a100"


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 503},
        {"status": 410},  # the continue token expired between pages
        {"latency_ms": 1500},  # longer than the read timeout
        {"lost_response": "truncate"},  # the page is cut off mid-answer
    ],
    ids=["5xx", "expired-continue", "timeout", "cut-short"],
)
def test_a_pod_listing_that_fails_midway_removes_nothing(
    kube_sim: KubeSimulator,
    observe: Observe,
    core: kubernetes.client.CoreV1Api,
    fault: dict[str, Any],
) -> None:
    seed(kube_sim, pods_per_node=3)
    observe()
    for name in ("job-0-0", "job-0-1", "job-1-0"):
        core.delete_namespaced_pod(name, "default")
    kube_sim.put("prod", pod_object("new", namespace="a-first", node=GPU_0))
    # 4 pods in pages of 2: a-first/new and default/job-0-2 come, the second page fails.
    kube_sim.fault(operation="list pods", skip=1, **fault)

    result = observe()

    assert not result.complete
    assert "pods: list pods" in result.errors[0]
    # What the first page showed is mirrored; nothing absent from it is judged gone.
    names = set(KubePod.objects.values_list("name", flat=True))
    assert names == {"new", "job-0-0", "job-0-1", "job-0-2", "job-1-0", "job-1-1", "job-1-2"}
    observation = ClusterObservation.objects.get(cluster__name="prod")
    assert not observation.complete
    assert "pods" in observation.error
    assert observation.pods_resource_version != ""  # still the last complete listing's

    kube_sim.clear_faults()
    assert observe().complete
    names = set(KubePod.objects.values_list("name", flat=True))
    assert names == {"new", "job-0-2", "job-1-1", "job-1-2"}


def test_a_node_listing_that_fails_midway_removes_no_node_and_raises_no_flag(
    kube_sim: KubeSimulator, observe: Observe, core: kubernetes.client.CoreV1Api
) -> None:
    kube_sim.put("prod", node_object(GPU_0), node_object(GPU_1), node_object("z-stray"))
    observe()
    core.delete_node(GPU_1)
    kube_sim.put("prod", node_object("a-stray"))
    started("gpu-1", minutes_ago=60)
    # 3 nodes in pages of 2: a-stray and gpu-0 come, the second page fails.
    kube_sim.fault(operation="list nodes", status=500, skip=1)

    result = observe()

    assert not result.complete
    assert KubeNode.objects.filter(name=GPU_1).exists()
    assert not node_flags("gpu-1").missing
    assert KubeNode.objects.get(name="a-stray").unowned_since is None


def test_nodes_are_matched_to_machines_by_provider_id_else_by_name(
    kube_sim: KubeSimulator, observe: Observe, pool: MachinePool
) -> None:
    kube_sim.put(
        "prod",
        # providerID names gpu-1's VM although the name reads as another host's.
        node_object("worker-7", provider_id="vco://nl-1/101"),
        # No providerID: matched by the VM name.
        node_object(GPU_0),
        # Its name is gpu-0's VM, but its providerID names an old VM: nobody's.
        node_object("capvco-prod-gpu-9", provider_id="vco://nl-1/999"),
    )
    Machine.objects.create(pool=pool, name="gpu-9", index=9, vm_id=109)

    observe()

    owners = dict(KubeNode.objects.values_list("name", "machine__name"))
    assert owners == {"worker-7": "gpu-1", GPU_0: "gpu-0", "capvco-prod-gpu-9": None}
    assert node_flags("gpu-0").joined_at is not None


def test_a_machine_whose_node_never_joined_is_flagged_after_the_timeout_and_not_before(
    kube_sim: KubeSimulator, observe: Observe, settings: Any
) -> None:
    settings.NODE_JOIN_TIMEOUT_SECONDS = 900
    kube_sim.put("prod", node_object(GPU_0))
    started("gpu-0", minutes_ago=60)
    started("gpu-1", minutes_ago=14)

    observe()
    late = node_flags("gpu-1")
    assert (late.missing, late.missing_reason) == (False, "")

    started("gpu-1", minutes_ago=16)
    observe()
    late = node_flags("gpu-1")
    assert late.missing
    assert late.missing_reason == (
        f"Never joined: no node named {GPU_1} or with providerID vco://nl-1/101, "
        "15 minutes after its VM started."
    )
    assert not node_flags("gpu-0").missing

    kube_sim.put("prod", node_object(GPU_1, provider_id="vco://nl-1/101"))
    observe()
    late = node_flags("gpu-1")
    assert (late.missing, late.missing_reason) == (False, "")
    assert late.joined_at is not None


def test_a_machine_not_running_is_never_flagged(kube_sim: KubeSimulator, observe: Observe) -> None:
    started("gpu-1", minutes_ago=60)
    Machine.objects.filter(name="gpu-1").update(phase=Machine.Phase.DELETING)

    observe()

    assert not node_flags("gpu-1").missing


def test_a_node_that_no_machine_owns_is_flagged_from_a_complete_listing_only(
    kube_sim: KubeSimulator, observe: Observe
) -> None:
    kube_sim.put(
        "prod",
        node_object("a-stray"),
        node_object("cp-0", labels={"node-role.kubernetes.io/control-plane": ""}),
        node_object(GPU_0),
    )
    # 3 nodes in pages of 2: a-stray and gpu-0 come, the second page fails once.
    kube_sim.fault(operation="list nodes", status=503, skip=1, times=1)

    observe()
    stray = KubeNode.objects.get(name="a-stray")  # mirrored, not yet flagged
    assert (stray.machine_id, stray.unowned_since) == (None, None)

    observe()
    flagged = KubeNode.objects.filter(unowned_since__isnull=False)
    # A control-plane node is not a machine of a pool: not flagged.
    assert set(flagged.values_list("name", flat=True)) == {"a-stray"}


def test_a_machine_deleted_with_force_leaves_its_node_unowned(
    kube_sim: KubeSimulator, observe: Observe
) -> None:
    seed(kube_sim)
    observe()
    Machine.objects.filter(name="gpu-1").delete()

    observe()

    node = KubeNode.objects.get(name=GPU_1)
    assert (node.machine_id, node.unowned_since is not None) == (None, True)


def test_the_task_observes_active_clusters_with_a_kubeconfig_only(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool
) -> None:
    seed(kube_sim)
    other = Cluster.objects.create(name="other", account=pool.cluster.account)
    assert list(kube_observed()) == [pool.cluster]

    observe_cluster_kube(pool.cluster_id)
    observe_cluster_kube(other.pk)  # no kubeconfig: nothing to do

    assert KubeNode.objects.filter(cluster=pool.cluster).count() == 2
    Cluster.objects.filter(pk=pool.cluster_id).update(state=Cluster.State.DELETING)
    assert list(kube_observed()) == []


def test_the_task_records_a_kubeconfig_that_cannot_be_used(pool: MachinePool) -> None:
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig="current-context: nowhere\n")

    observe_cluster_kube(pool.cluster_id)

    observation = ClusterObservation.objects.get(cluster_id=pool.cluster_id)
    assert not observation.complete
    assert "contexts" in observation.error


def test_flagging_a_node_joined_or_missing_leaves_the_machine_row_to_act(
    kube_sim: KubeSimulator, observe: Observe, settings: Any
) -> None:
    # Act claims a machine by compare-and-set on its row (`updated_at`): the observer writes
    # its flags beside it, whichever way it writes them, never on it.
    settings.NODE_JOIN_TIMEOUT_SECONDS = 900
    kube_sim.put("prod", node_object(GPU_0))
    started("gpu-0", minutes_ago=60)
    started("gpu-1", minutes_ago=60)
    Machine.objects.update(phase=Machine.Phase.RUNNING)
    before = list(Machine.objects.order_by("pk").values())

    observe()

    assert node_flags("gpu-0").joined_at is not None
    assert node_flags("gpu-1").missing
    assert list(Machine.objects.order_by("pk").values()) == before


def test_a_machine_given_a_new_vm_joins_anew(
    kube_sim: KubeSimulator, observe: Observe, settings: Any
) -> None:
    settings.NODE_JOIN_TIMEOUT_SECONDS = 900
    kube_sim.put("prod", node_object(GPU_1, provider_id="vco://nl-1/101"))
    started("gpu-1", minutes_ago=60)
    Machine.objects.filter(name="gpu-1").update(phase=Machine.Phase.RUNNING)
    observe()
    assert node_flags("gpu-1").joined_at is not None

    # Act replaced its VM (a new id): the node still listed is the old VM's, and the new
    # VM's has not joined yet.
    Machine.objects.filter(name="gpu-1").update(vm_id=202)
    started("gpu-1", minutes_ago=60)
    observe()

    flags = node_flags("gpu-1")
    assert (flags.vm_id, flags.joined_at, flags.missing) == (202, None, True)
    assert flags.missing_reason.startswith("Never joined:")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first", ["observation", "delete"])
def test_a_machine_deleted_during_an_observation_leaves_no_node_linked_to_it(
    kube_sim: KubeSimulator,
    observe: Observe,
    require_postgres: None,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    first: str,
) -> None:
    """A machine deleted in another session (its teardown, a force delete) either after the
    observation read the cluster's machines (the delete waits for the pass) or in flight
    before it (the pass waits, and then does not see the machine): the pass commits, and
    no node is linked to the gone machine, no flag names it. Found by the seeded fault run
    of our own parts: the pass linked a node to a machine deleted meanwhile, and failed at
    its commit (a foreign key to a machine no longer there)."""
    settings.NODE_JOIN_TIMEOUT_SECONDS = 900
    seed(kube_sim)
    started("gpu-1", minutes_ago=60)
    Machine.objects.update(phase=Machine.Phase.RUNNING)
    machine = Machine.objects.get(name="gpu-1")
    observer, person = backend_pid(), []
    deleted, done, observed = threading.Event(), threading.Event(), threading.Event()

    def delete(hold: bool) -> None:
        try:
            person.append(backend_pid())
            with transaction.atomic():
                machine_force_delete(machine=machine, actor=SystemActor.RECONCILER, reason="x")
                deleted.set()
                if hold:  # in flight until the observation waits for it (or is over)
                    until(lambda: observed.is_set() or waits_on_a_lock(observer), timeout=60)
        finally:
            done.set()
            connection.close()

    thread = threading.Thread(target=delete, args=(first == "delete",))
    if first == "delete":
        thread.start()
        assert deleted.wait(timeout=10)
    else:
        load = NodeOwners.load.__func__  # type: ignore[attr-defined]

        def load_then_delete(cls: type[NodeOwners], cluster: Cluster, **options: Any) -> Any:
            owners = load(cls, cluster, **options)
            if not thread.is_alive() and not done.is_set():
                thread.start()
                assert until(lambda: done.is_set() or bool(person and waits_on_a_lock(person[0])))
            return owners

        monkeypatch.setattr(NodeOwners, "load", classmethod(load_then_delete))
    began = timezone.now()
    try:
        result = observe()  # raises if the pass failed at its commit
    finally:
        observed.set()
        thread.join(timeout=60)

    assert result.complete and done.is_set()
    assert not Machine.objects.filter(pk=machine.pk).exists()
    observation = ClusterObservation.objects.get()
    assert observation.started_at is not None and observation.started_at >= began
    assert dict(KubeNode.objects.values_list("name", "machine__name")) == {
        GPU_0: "gpu-0",
        GPU_1: None,
    }
    assert list(MachineNode.objects.values_list("machine__name", flat=True)) == ["gpu-0"]


@pytest.mark.django_db(transaction=True)
def test_a_cluster_is_deleted_only_once_the_pass_over_its_kubernetes_ended(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool, require_postgres: None
) -> None:
    """The last step of a cluster's deletion, while a pass over its Kubernetes lists its
    pods: refused, saying so; the pass commits; the next try deletes the cluster and all
    the pass wrote. Found by the seeded fault run of our own parts (seed 61): the rows
    went under a pass, whose stamp then named a cluster gone and failed at its commit."""
    seed(kube_sim)
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    Machine.objects.filter(pool=pool).delete()  # torn down: the cluster's rows are left
    kube_sim.fault(operation="list pods", latency_ms=2000, times=1)
    failed: list[BaseException] = []

    def observe_task() -> None:
        try:
            observe_cluster_kube(cluster.pk)
        except BaseException as exc:  # the pass's own error, judged below
            failed.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=observe_task)
    thread.start()
    # The nodes are listed: the pods' listing, slow, is on its way.
    assert until(lambda: any(c["operation"] == "list nodes" for c in kube_sim.calls("prod")))
    Cluster.objects.filter(pk=cluster.pk).update(state=Cluster.State.DELETING)
    with pytest.raises(InUse, match="its Kubernetes is being observed"):
        cluster_rows_delete(cluster=cluster, actor=SystemActor.RECONCILER, reason="torn down")
    thread.join(timeout=30)

    assert not failed, failed
    # The pass committed its stamp (the slow listing ran past the read timeout).
    assert ClusterObservation.objects.get(cluster=cluster).error.startswith("pods: list pods")
    assert KubeNode.objects.filter(cluster=cluster).count() == 2
    cluster_rows_delete(cluster=cluster, actor=SystemActor.RECONCILER, reason="torn down")
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    assert not KubeNode.objects.exists() and not ClusterObservation.objects.exists()
