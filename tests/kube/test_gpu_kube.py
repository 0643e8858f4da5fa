"""What the control plane writes in a workload cluster: the GPU labels of its nodes and the
GPU add-on; and the flag on a GPU node that advertises no GPU. The official client
against the fake API server over HTTP, through the observe task."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import kubernetes
import kubernetes_validate
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from capvco_web.models import AuditEvent, PlanPass
from clusters.models import Cluster, Machine, MachinePool
from gpus.models import VgpuReservation
from kube.client import kube_client
from kube.gpu_addon import (
    ADDON_NAME,
    ADDON_NAMESPACE,
    HASH_ANNOTATION,
    addon_manifest,
    cluster_gpu_addon_observe,
)
from kube.gpu_nodes import GPU_COUNT_LABEL, GPU_TYPE_LABEL, gpu_label_value
from kube.models import KubeNode
from kube.observe import cluster_kube_observe
from kube.plan import ADDON_APPLY, NODE_LABELS, kube_plan, kube_steps_act
from kube.tasks import observe_cluster_kube
from tests.factories import (
    GpuProfileFactory,
    VgpuReservationFactory,
    gpu_addon_held,
    gpu_addon_state_of,
)
from tests.kube_sim import KubeSimulator, SimCluster, node_object

GPU_0, GPU_1 = "capvco-prod-gpu-0", "capvco-prod-gpu-1"
T4 = {GPU_TYPE_LABEL: "nvidia-tesla-t4", GPU_COUNT_LABEL: "1"}


@pytest.fixture
def gpus(pool: MachinePool) -> None:
    """Each machine of pool `gpu` has one vGPU attached, on a Tesla T4 card of nl-1."""
    location = pool.site.location
    GpuProfileFactory(location=location, profile_id="card-t4", model="Tesla T4 (0000:3b:00.0)")
    for machine in pool.machines.all():
        VgpuReservationFactory(machine=machine, location=location, gpu_id="card-t4")


@pytest.fixture
def sim_cluster(kube_sim: KubeSimulator, pool: MachinePool, gpus: None) -> SimCluster:
    found = kube_sim.cluster("prod")
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)
    kube_sim.put(
        "prod",
        node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1),
        node_object(GPU_1, gpus=1, labels={"team": "ml"}),
        node_object("cp-0", labels={"node-role.kubernetes.io/control-plane": ""}),
        node_object("stray", gpus=1),
    )
    return found


@pytest.fixture
def core(sim_cluster: SimCluster) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config_dict(sim_cluster.kubeconfig)
    )


@pytest.fixture
def apps(sim_cluster: SimCluster) -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(
        kubernetes.config.new_client_from_config_dict(sim_cluster.kubeconfig)
    )


def run(pool: MachinePool) -> None:
    observe_cluster_kube(pool.cluster_id)


def labels(core: kubernetes.client.CoreV1Api) -> dict[str, dict[str, str]]:
    return {
        node.metadata.name: {k: v for k, v in node.metadata.labels.items() if "capvco" in k}
        for node in core.list_node().items
    }


def writes(kube_sim: KubeSimulator) -> list[str]:
    return [f"{c['operation']} {c['path']}" for c in kube_sim.calls("prod") if c["method"] != "GET"]


def sql_writes(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"].split(" SET ")[0].split(" (")[0]
        for q in queries.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))
    ]


@pytest.mark.parametrize(
    ("gpu_type", "label"),
    [
        ("NVIDIA A100", "nvidia-a100"),
        ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb"),
        ("  Tesla V100 (32 GB) ", "tesla-v100-32-gb"),
        ("NVIDIA RTX 6000 Ada / vGPU 48Q", "nvidia-rtx-6000-ada-vgpu-48q"),
        ("Ünïcode GPU", "n-code-gpu"),
        ("x" * 70 + "-y", "x" * 63),
    ],
)
def test_a_gpu_type_becomes_a_valid_stable_label_value(gpu_type: str, label: str) -> None:
    assert gpu_label_value(gpu_type) == label
    assert gpu_label_value(label) == label  # a label value reads as itself


def test_gpu_nodes_are_labelled_once_and_a_second_pass_writes_nothing(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool
) -> None:
    run(pool)

    assert labels(core) == {GPU_0: T4, GPU_1: T4, "cp-0": {}, "stray": {}}
    assert writes(kube_sim) == [f"patch nodes /api/v1/nodes/{n}" for n in (GPU_0, GPU_1)]
    # Other labels are left as they were; the mirror holds what the patch answered.
    assert core.read_node(GPU_1).metadata.labels["team"] == "ml"
    assert KubeNode.objects.get(name=GPU_0).labels[GPU_TYPE_LABEL] == "nvidia-tesla-t4"

    kube_sim.clear_calls()
    with CaptureQueriesContext(connection) as queries:
        run(pool)

    assert writes(kube_sim) == []
    assert sql_writes(queries) == ['UPDATE "kube_clusterobservation"']  # the observation stamp


def test_label_writes_are_counted_in_the_metrics(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool, settings: Any
) -> None:
    settings.METRICS_TOKEN = "scrape"
    metrics = Client(HTTP_AUTHORIZATION="Bearer scrape")

    def patched() -> float:
        families = text_string_to_metric_families(metrics.get("/metrics").content.decode())
        return sum(
            sample.value
            for family in families
            for sample in family.samples
            if sample.name == "capvco_kube_writes_total"
            and sample.labels == {"what": "node_labels", "outcome": "patched"}
        )

    before = patched()
    run(pool)
    run(pool)

    assert patched() - before == 2


def test_a_removed_label_is_restored_and_a_replaced_node_is_labelled_again(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool
) -> None:
    run(pool)
    core.patch_node(GPU_0, {"metadata": {"labels": {GPU_TYPE_LABEL: None}}})
    core.patch_node(GPU_1, {"metadata": {"labels": {GPU_COUNT_LABEL: "7"}}})
    # gpu-1's VM was replaced: its node registers afresh, without our labels.
    core.delete_node(GPU_1)
    kube_sim.put("prod", node_object(GPU_1, provider_id="vco://nl-1/101", gpus=1))
    kube_sim.clear_calls()

    run(pool)

    assert labels(core)[GPU_0] == T4 and labels(core)[GPU_1] == T4
    assert len(writes(kube_sim)) == 2


def test_the_labels_follow_the_card_and_count_attached_not_the_pool_spelling(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool
) -> None:
    machine = Machine.objects.get(name="gpu-1")
    VgpuReservationFactory(machine=machine, location=pool.site.location, gpu_id="card-t4")
    VgpuReservationFactory(
        machine=Machine.objects.get(name="gpu-0"), location=pool.site.location,
        gpu_id="card-t4", state=VgpuReservation.State.RELEASING,
    )  # fmt: skip
    MachinePool.objects.filter(pk=pool.pk).update(gpu_type="t4")

    run(pool)

    assert labels(core)[GPU_1] == {GPU_TYPE_LABEL: "nvidia-tesla-t4", GPU_COUNT_LABEL: "2"}
    assert labels(core)[GPU_0] == T4


def test_nothing_is_labelled_from_a_partial_node_listing(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool, settings: Any
) -> None:
    settings.KUBE_LIST_PAGE_SIZE = 2
    kube_sim.fault(operation="list nodes", status=503, skip=1, times=1)

    run(pool)

    assert writes(kube_sim) == []
    assert labels(core)[GPU_0] == {}
    run(pool)
    assert labels(core)[GPU_0] == T4


def test_a_failed_label_write_is_tried_again_on_the_next_pass(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool
) -> None:
    kube_sim.fault(operation="patch nodes", status=500, times=1)

    run(pool)
    assert labels(core)[GPU_0] == {} and labels(core)[GPU_1] == T4

    run(pool)
    assert labels(core)[GPU_0] == T4


# --- the GPU add-on ---------------------------------------------------------------------


def daemonset(apps: kubernetes.client.AppsV1Api) -> Any:
    found = apps.list_namespaced_daemon_set(ADDON_NAMESPACE).items
    return found[0] if found else None


def test_the_addon_manifest_is_valid_kubernetes_and_targets_labelled_gpu_nodes() -> None:
    manifest, digest = addon_manifest()

    for version in ("1.30.0", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(manifest, version, strict=True)
    pod = manifest["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": GPU_TYPE_LABEL, "operator": "Exists"}
    ]
    assert pod["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    assert manifest["metadata"]["annotations"] == {HASH_ANNOTATION: digest}


def test_the_addon_is_applied_once_updated_on_a_new_image_and_removed_when_off(
    kube_sim: KubeSimulator, apps: kubernetes.client.AppsV1Api, pool: MachinePool, settings: Any
) -> None:
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=True)
    add_on = f"/apis/apps/v1/namespaces/{ADDON_NAMESPACE}/daemonsets"

    run(pool)
    kube_sim.clear_calls()
    run(pool)

    assert writes(kube_sim) == []  # read, found as it should be, left alone
    created = daemonset(apps)
    assert created.metadata.name == ADDON_NAME
    held = gpu_addon_state_of(pool.cluster_id)
    assert created.metadata.annotations[HASH_ANNOTATION] == held.hash
    assert held.applied_at is not None and held.error == ""

    settings.GPU_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    run(pool)
    assert writes(kube_sim) == [f"update daemonsets {add_on}/{ADDON_NAME}"]
    replaced = daemonset(apps)
    assert replaced.spec.template.spec.containers[0].image.endswith(":v0.17.1")
    assert replaced.metadata.uid == created.metadata.uid

    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=False)
    kube_sim.clear_calls()
    run(pool)
    assert writes(kube_sim) == [f"delete daemonsets {add_on}/{ADDON_NAME}"]
    kube_sim.clear_calls()
    run(pool)

    assert [c["operation"] for c in kube_sim.calls("prod")] == ["list nodes", "list pods"]
    assert daemonset(apps) is None
    held = gpu_addon_state_of(pool.cluster_id)
    assert (held.hash, held.applied_at) == ("", None)
    assert list(
        AuditEvent.objects.filter(actor_name="gpu-addon")
        .order_by("pk")
        .values_list("action", flat=True)
    ) == ["cluster.gpu_addon_apply", "cluster.gpu_addon_apply", "cluster.gpu_addon_remove"]


def test_a_deleted_addon_is_applied_again(
    kube_sim: KubeSimulator, apps: kubernetes.client.AppsV1Api, pool: MachinePool
) -> None:
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=True)
    run(pool)
    apps.delete_namespaced_daemon_set(ADDON_NAME, ADDON_NAMESPACE)

    run(pool)

    assert daemonset(apps) is not None


def test_a_daemonset_of_that_name_that_is_not_ours_is_never_replaced_nor_deleted(
    kube_sim: KubeSimulator, apps: kubernetes.client.AppsV1Api, pool: MachinePool
) -> None:
    theirs = {
        "metadata": {"name": ADDON_NAME, "labels": {"app": "theirs"}},
        "spec": {
            "selector": {"matchLabels": {"app": "theirs"}},
            "template": {
                "metadata": {"labels": {"app": "theirs"}},
                "spec": {"containers": [{"name": "x", "image": "theirs:1"}]},
            },
        },
    }
    apps.create_namespaced_daemon_set(ADDON_NAMESPACE, theirs)
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=True)

    run(pool)

    assert "capvco-web did not make" in gpu_addon_state_of(pool.cluster_id).error
    assert daemonset(apps).spec.template.spec.containers[0].image == "theirs:1"
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=False)
    gpu_addon_held(pool.cluster_id, hash="x")
    run(pool)
    assert daemonset(apps) is not None


def test_a_cluster_that_never_had_the_addon_is_not_asked_about_it(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool
) -> None:
    run(pool)

    assert not [c for c in kube_sim.calls("prod") if "daemonsets" in c["path"]]


# --- GPU nodes that advertise no GPU ----------------------------------------------------


def joined(name: str, minutes_ago: float) -> None:
    KubeNode.objects.filter(name=name).update(
        first_seen_at=timezone.now() - timedelta(minutes=minutes_ago)
    )


def test_a_gpu_node_that_advertises_no_gpu_is_flagged_after_the_timeout(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool, settings: Any
) -> None:
    settings.GPU_ADVERTISE_TIMEOUT_SECONDS = 600
    kube_sim.put("prod", node_object(GPU_1, gpus=1, allocatable_gpus=0))
    kube_sim.put("prod", node_object("stray", gpus=1, allocatable_gpus=0))
    run(pool)
    joined(GPU_1, minutes_ago=9)
    joined("stray", minutes_ago=60)
    run(pool)
    assert not KubeNode.objects.filter(gpus_missing=True).exists()

    joined(GPU_1, minutes_ago=11)
    run(pool)

    node = KubeNode.objects.get(name=GPU_1)
    assert node.gpus_missing
    assert node.gpus_missing_reason == (
        "No nvidia.com/gpu advertised 10 minutes after it joined (1 x NVIDIA Tesla T4 "
        "attached): the GPU add-on is off for this cluster: nothing here installs the "
        "device plugin."
    )
    # Only machines of GPU pools: an unowned node is flagged as unowned, not for GPUs.
    assert not KubeNode.objects.get(name="stray").gpus_missing

    kube_sim.put("prod", node_object(GPU_1, gpus=1))
    run(pool)
    node.refresh_from_db()
    assert (node.gpus_missing, node.gpus_missing_reason) == (False, "")


def test_the_timeout_counts_from_the_addon_applied_when_that_is_later(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool
) -> None:
    kube_sim.put("prod", node_object(GPU_1, gpus=1, allocatable_gpus=0))
    run(pool)
    joined(GPU_1, minutes_ago=60)
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=True)

    run(pool)  # the add-on is applied now: the device plugin has its time to start
    assert not KubeNode.objects.get(name=GPU_1).gpus_missing

    gpu_addon_held(pool.cluster_id, applied_at=timezone.now() - timedelta(minutes=30))
    run(pool)
    node = KubeNode.objects.get(name=GPU_1)
    assert node.gpus_missing
    assert node.gpus_missing_reason.endswith(
        "is the device plugin running there, and the driver installed?"
    )


def test_no_gpu_flag_is_raised_from_a_partial_node_listing(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool, settings: Any
) -> None:
    settings.KUBE_LIST_PAGE_SIZE = 2
    kube_sim.put("prod", node_object(GPU_1, gpus=1, allocatable_gpus=0))
    run(pool)
    joined(GPU_1, minutes_ago=60)
    kube_sim.fault(operation="list nodes", status=503, skip=1, times=1)

    run(pool)

    assert not KubeNode.objects.get(name=GPU_1).gpus_missing


def test_a_label_step_whose_node_changed_since_the_plan_is_dropped_and_planned_again(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool
) -> None:
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        assert cluster_kube_observe(client=client, cluster=cluster).complete
    steps = kube_plan(Cluster.objects.get(pk=pool.cluster_id))
    assert [(step.kind, step.target) for step in steps] == [
        ("node_labels", f"node {GPU_0}"),
        ("node_labels", f"node {GPU_1}"),
    ]
    assert [str(call) for call in steps[0].calls()] == [f"kubernetes PATCH /api/v1/nodes/{GPU_0}"]
    # Since the plan, a listing wrote gpu-0's row again: what the step compared is old.
    KubeNode.objects.filter(name=GPU_0).update(updated_at=timezone.now())
    kube_sim.clear_calls()

    with kube_client(cluster) as client:
        result = kube_steps_act(client=client, steps=steps)

    assert writes(kube_sim) == [f"patch nodes /api/v1/nodes/{GPU_1}"]
    assert len(result.dropped) == 1 and result.errors == []
    assert labels(core)[GPU_0] == {}
    run(pool)
    assert labels(core)[GPU_0] == T4


def test_an_addon_step_is_dropped_when_the_addon_was_turned_off_since_the_plan(
    kube_sim: KubeSimulator, apps: kubernetes.client.AppsV1Api, pool: MachinePool
) -> None:
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=True)
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        cluster_gpu_addon_observe(client=client, cluster=cluster)
    steps = [s for s in kube_plan(cluster) if s.kind == "gpu_addon_apply"]
    assert [str(call) for step in steps for call in step.calls()] == [
        f"kubernetes POST /apis/apps/v1/namespaces/{ADDON_NAMESPACE}/daemonsets"
    ]
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=False)
    kube_sim.clear_calls()

    with kube_client(cluster) as client:
        result = kube_steps_act(client=client, steps=steps)

    assert writes(kube_sim) == [] and len(result.dropped) == 1
    assert daemonset(apps) is None


# --- labels that no longer apply, and a replace from a stale read ---------------------


def test_labels_that_no_longer_apply_are_removed_as_the_dry_run_shows(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool
) -> None:
    run(pool)
    location = pool.site.location
    GpuProfileFactory(location=location, profile_id="card-l4", model="L4 (0000:3c:00.0)")
    # gpu-0's machine lost its vGPU; gpu-1's is now on an L4.
    VgpuReservation.objects.filter(machine__name="gpu-0").update(
        state=VgpuReservation.State.RELEASED
    )
    VgpuReservation.objects.filter(machine__name="gpu-1").update(gpu_id="card-l4")
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        assert cluster_kube_observe(client=client, cluster=cluster).complete
    steps = kube_plan(Cluster.objects.get(pk=pool.cluster_id))
    assert [step.describe() for step in steps] == [
        f"label node {GPU_0}: remove {GPU_TYPE_LABEL}, remove {GPU_COUNT_LABEL} "
        "(its machine has no vGPU attached)",
        f"label node {GPU_1}: {GPU_COUNT_LABEL}=1, {GPU_TYPE_LABEL}=nvidia-l4 "
        "(its machine has 1 x NVIDIA L4 attached)",
    ]
    shown = sorted(str(call) for step in steps for call in step.calls())
    kube_sim.clear_calls()

    with kube_client(cluster) as client:
        result = kube_steps_act(client=client, steps=steps)

    made = sorted(
        f"kubernetes {c['method']} {c['path']}"
        for c in kube_sim.calls("prod")
        if c["method"] != "GET"
    )
    assert made == shown and len(result.applied) == 2
    assert labels(core)[GPU_0] == {}
    assert labels(core)[GPU_1] == {GPU_TYPE_LABEL: "nvidia-l4", GPU_COUNT_LABEL: "1"}
    assert core.read_node(GPU_1).metadata.labels["team"] == "ml"  # not ours: left alone
    assert GPU_TYPE_LABEL not in KubeNode.objects.get(name=GPU_0).labels  # as answered
    kube_sim.clear_calls()
    run(pool)
    assert writes(kube_sim) == [] and kube_plan(Cluster.objects.get(pk=pool.cluster_id)) == []


def test_gpu_labels_on_a_node_of_no_machine_of_ours_are_left_alone(
    kube_sim: KubeSimulator, core: kubernetes.client.CoreV1Api, pool: MachinePool
) -> None:
    core.patch_node("stray", {"metadata": {"labels": T4}})

    run(pool)

    assert labels(core)["stray"] == T4


def test_an_addon_replace_from_a_stale_read_is_refused_dropped_and_planned_again(
    kube_sim: KubeSimulator, apps: kubernetes.client.AppsV1Api, pool: MachinePool, settings: Any
) -> None:
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=True)
    run(pool)
    settings.GPU_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        cluster_gpu_addon_observe(client=client, cluster=cluster)
    read = daemonset(apps).metadata.resource_version
    assert gpu_addon_state_of(pool.cluster_id).resource_version == read
    (step,) = [
        s for s in kube_plan(Cluster.objects.get(pk=pool.cluster_id)) if s.kind != "node_labels"
    ]
    assert f"from resourceVersion {read}" in step.describe()
    # Someone changes it between the read and the write.
    apps.patch_namespaced_daemon_set(
        ADDON_NAME, ADDON_NAMESPACE, {"metadata": {"annotations": {"team": "ml"}}}
    )
    kube_sim.clear_calls()

    with kube_client(cluster) as client:
        result = kube_steps_act(client=client, steps=[step])

    (put,) = [c for c in kube_sim.calls("prod") if c["method"] == "PUT"]
    assert put["status"] == 409
    assert len(result.dropped) == 1 and result.errors == []
    kept = daemonset(apps)
    assert kept.metadata.annotations["team"] == "ml"  # theirs, not overwritten unseen
    assert kept.spec.template.spec.containers[0].image.endswith(":v0.17.0")
    assert gpu_addon_state_of(pool.cluster_id).error == ""

    run(pool)  # reads it again, and replaces it from what is there now

    assert daemonset(apps).spec.template.spec.containers[0].image.endswith(":v0.17.1")
    kube_sim.clear_calls()
    run(pool)
    assert writes(kube_sim) == []
    held = gpu_addon_state_of(pool.cluster_id)
    assert held.resource_version == daemonset(apps).metadata.resource_version


def test_the_kubernetes_steps_go_through_the_dispatcher_and_their_pass_is_kept(
    kube_sim: KubeSimulator, sim_cluster: SimCluster, pool: MachinePool
) -> None:
    """Node labels and the add-on's apply are steps like a machine's: carried out by the
    one dispatcher, and the pass (what was planned, what came of each step) is on the
    cluster's record; a pass with nothing left to do keeps nothing."""
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_addon=True)

    run(pool)  # labels missing, the add-on not there: both written
    run(pool)  # found as they should be: nothing planned

    (kept,) = PlanPass.objects.filter(scope=PlanPass.Scope.CLUSTER, scope_id=pool.cluster_id)
    kinds = [step["kind"] for step in kept.planned]
    assert ADDON_APPLY in kinds and NODE_LABELS in kinds
    assert [(o["kind"], o["outcome"]) for o in kept.outcomes] == [(k, "ran") for k in kinds]
    assert any(w.startswith("create daemonsets") for w in writes(kube_sim))
