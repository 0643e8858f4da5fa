"""GPU use read from NVIDIA's dcgm-exporter through the API server's pod proxy: the fake
API serves the exporter's text with the samples of a real H200 node (idle, then busy, then
idle again: ../shared/gpu-node/utilisation-idle-then-busy.csv), one line a read, and the
observe task reads it over HTTP."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from cloud.models import Location
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from gpus.models import VgpuReservation
from kube.client import kube_client
from kube.gpu_use import (
    MEMORY_USED,
    UTILISATION,
    cluster_gpu_use_observe,
    exporter_readings,
    gpu_use,
    gpu_use_due,
    gpu_use_summary,
    location_gpu_use,
)
from kube.models import GpuUseLocation, GpuUseSample, GpuUseState
from kube.observe import cluster_kube_observe
from kube.tasks import observe_cluster_kube
from tests.factories import VgpuReservationFactory
from tests.kube_sim import (
    DCGM_NAMESPACE,
    KubeSimulator,
    dcgm_exporter_objects,
    node_object,
    pod_object,
    recorded_utilisation,
)

GPU_0, GPU_1, CPU_0 = "capvco-prod-gpu-0", "capvco-prod-gpu-1", "capvco-prod-cpu-0"
REMOTE = "capvco-prod-remote-0"  # in another location (`spanning`)
UUID = "GPU-a54cc8e3-5c0b-336d-1a96-de062f90b427"  # the recorded H200's
STEP = timedelta(minutes=15)  # between two reads: the recording's 20 lines span 4 h 45 min

# What dcgm-exporter 4.x prints for two GPUs, one held by a pod (its default counters, cut
# short; the pod-resources mapping on), in the form of its README's example.
EXPORTER_TEXT = (Path(__file__).parent / "fixtures" / "dcgm-exporter.txt").read_text()


def test_the_exporter_text_is_read_per_gpu_with_the_pod_that_holds_it() -> None:
    readings = exporter_readings(EXPORTER_TEXT, node_name=GPU_0)
    found = [
        (r.gpu, r.uuid, r.namespace, r.pod, r.utilisation, r.memory_used_mib) for r in readings
    ]
    assert found == [
        (0, UUID, "ml", "train-0", 100, 883),
        (1, "GPU-0b6a3c2e-1111-2222-3333-444455556666", "", "", 0, 0),
    ]
    assert {r.node_name for r in readings} == {GPU_0}  # the pod's node, not its Hostname
    assert readings[0].model_name == "NVIDIA H200"


def test_a_gpu_without_both_figures_is_left_out_and_other_text_refused() -> None:
    only_use = "\n".join(line for line in EXPORTER_TEXT.splitlines() if MEMORY_USED not in line)
    assert exporter_readings(only_use, node_name=GPU_0) == []
    with pytest.raises(ValueError, match="Prometheus text format"):
        exporter_readings(f'{UTILISATION}{{gpu="0" 5\n', node_name=GPU_0)


@pytest.fixture
def recorded(kube_sim: KubeSimulator, pool: MachinePool) -> Cluster:
    """Cluster prod: GPU node gpu-0 (machine gpu-0, whose vGPU 0 is attached) runs pod
    ml/train-0 on its one H200, whose exporter serves the recording (a second exporter pod,
    still Pending, beside it); GPU node gpu-1 runs an exporter that does not answer; cpu-0
    runs none."""
    found = kube_sim.cluster("prod")
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)
    machine = pool.machines.get(name="gpu-0")
    VgpuReservationFactory(machine=machine, location=pool.site.location, owner_index=0)
    kube_sim.put(
        "prod",
        node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1),
        node_object(GPU_1, provider_id="vco://nl-1/101", gpus=1),
        node_object(CPU_0),
        pod_object("train-0", namespace="ml", node=GPU_0, gpus=1),
        *dcgm_exporter_objects(GPU_0, GPU_1),
        rolling_update_pod(),
    )
    held = {"pod": "train-0", "namespace": "ml", "container": "main"}
    gpu = {"gpu": 0, "uuid": UUID, "model": "NVIDIA H200", **held}
    kube_sim.dcgm("prod", {GPU_0: [{**gpu, "samples": recorded_utilisation()}]})
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        cluster_kube_observe(client=client, cluster=cluster)
    return cluster


@pytest.fixture
def spanning(recorded: Cluster, kube_sim: KubeSimulator) -> Cluster:
    """`recorded`, and in a second location, de-1: pool remote's machine remote-0 runs node
    remote-0, whose GPU 0 pod serve/infer-0 holds at 40 % and whose GPU 1 is idle."""
    de = Location.objects.create(account=recorded.account, name="de-1")
    site = ClusterSite.objects.create(
        cluster=recorded, location=de, cloudspace_id="cs-2", image_id=1
    )
    pool = MachinePool.objects.create(
        cluster=recorded, site=site, name="remote", replicas=1, gpu_type="T4", gpu_count=2
    )
    Machine.objects.create(
        pool=pool, name="remote-0", index=0, vm_id=200, phase=Machine.Phase.RUNNING
    )
    kube_sim.put(
        "prod",
        node_object(REMOTE, provider_id="vco://de-1/200", gpus=2),
        pod_object("infer-0", namespace="serve", node=REMOTE, gpus=1),
        *dcgm_exporter_objects(REMOTE)[2:],  # its exporter pod (the Service is there)
    )
    held = {"gpu": 0, "uuid": UUID, "model": "NVIDIA H200", "pod": "train-0", "namespace": "ml"}
    kube_sim.dcgm(
        "prod",
        {
            GPU_0: [{**held, "samples": recorded_utilisation()}],
            REMOTE: [
                {"gpu": 0, "uuid": "GPU-r0", "pod": "infer-0", "namespace": "serve",
                 "samples": [{"util": 40, "fb_used": 1000}]},
                {"gpu": 1, "uuid": "GPU-r1", "samples": [{"util": 0, "fb_used": 0}]},
            ],
        },
    )  # fmt: skip
    with kube_client(recorded) as client:
        cluster_kube_observe(client=client, cluster=recorded)
    return recorded


def rolling_update_pod() -> dict[str, object]:
    pod = pod_object("nvidia-dcgm-exporter-new", namespace=DCGM_NAMESPACE, node=GPU_0)
    pod["metadata"]["labels"] = {"app": "nvidia-dcgm-exporter"}
    pod["status"] = {"phase": "Pending"}
    return pod


def read(cluster: Cluster, now: datetime) -> int:
    with kube_client(cluster) as client:
        return cluster_gpu_use_observe(client=client, cluster=cluster, now=now)


def test_the_recorded_node_is_unused_for_hours_then_in_use_and_its_efficiency_follows(
    recorded: Cluster, kube_sim: KubeSimulator
) -> None:
    start = timezone.now() - 19 * STEP
    utilisation = [int(sample["util"]) for sample in recorded_utilisation()]
    statuses = []
    for n in range(len(utilisation)):
        # gpu-1's exporter does not answer; gpu-0's is read once, not twice.
        assert read(recorded, start + n * STEP) == 1
        (row,) = gpu_use(recorded, now=start + n * STEP).gpus
        statuses.append(row.status)
    # 3 % then 0 % for 8 reads (2 h at 15 min: GPU_UNUSED_HOURS) is requested but unused;
    # the busy lines put it in use, and the 4 idle lines after are under 2 h.
    assert utilisation[:9] == [3, 0, 0, 0, 0, 0, 0, 0, 0] and utilisation[9:16] == [100] * 7
    assert statuses == ["in use"] * 8 + ["requested but unused"] + ["in use"] * 11

    use = gpu_use(recorded, now=start + 19 * STEP)
    (row,) = use.gpus
    assert (row.node_name, row.gpu, row.uuid, row.namespace, row.pod) == (
        GPU_0, 0, UUID, "ml", "train-0",
    )  # fmt: skip
    assert (row.machine, row.pool) == ("gpu-0", "gpu")
    assert row.reservation == VgpuReservation.objects.get(machine__name="gpu-0").name
    assert (row.utilisation, row.memory_used_mib) == (0, 0)
    assert row.unused_since == start + 16 * STEP
    mean = (Decimal(sum(utilisation)) / len(utilisation)).quantize(Decimal("0.1"))
    assert row.mean_utilisation == use.cluster.percent == mean
    assert [(e.name, e.percent, e.gpu_count) for e in use.namespaces] == [("ml", mean, 1)]
    assert [(e.name, e.percent) for e in use.pools] == [("gpu", mean)]
    # Read through the pod proxy of each exporter pod, not the Service's (one pod at random).
    proxied = {c["path"] for c in kube_sim.calls("prod") if "proxy" in c["path"]}
    assert proxied == {
        f"/api/v1/namespaces/{DCGM_NAMESPACE}/pods/nvidia-dcgm-exporter-{node}:9400/proxy/metrics"
        for node in (GPU_0, GPU_1)
    }
    # gpu-1's exporter did not answer: its GPU is unknown, not 0 %.
    assert use.exporter == f"{DCGM_NAMESPACE}/nvidia-dcgm-exporter"
    assert use.error.startswith(f"{GPU_1}: ")
    assert GPU_1 not in {r.node_name for r in use.gpus}


def test_a_failed_read_is_unknown_and_keeps_what_was_read(
    recorded: Cluster, kube_sim: KubeSimulator
) -> None:
    now = timezone.now()
    read(recorded, now - STEP)
    kube_sim.fault(operation="list services", status=500)
    assert read(recorded, now) == 0
    use = gpu_use(recorded, now=now)
    assert use.error.startswith("exporter services: ")
    assert use.exporter == f"{DCGM_NAMESPACE}/nvidia-dcgm-exporter"  # not known to be gone
    assert [row.sampled_at for row in use.gpus] == [now - STEP]  # the last read, not 0 %


def test_a_cluster_without_the_exporter_has_no_gpu_use_data(
    recorded: Cluster, kube_sim: KubeSimulator
) -> None:
    kube_sim.reset()
    found = kube_sim.cluster("prod")
    Cluster.objects.filter(pk=recorded.pk).update(kubeconfig=found.kubeconfig_yaml)
    recorded.refresh_from_db()
    read(recorded, timezone.now())
    use = gpu_use(recorded, now=timezone.now())
    assert (use.has_data, use.exporter, use.error, use.cluster.percent) == (False, "", "", None)


def test_samples_older_than_the_window_are_deleted_as_new_ones_are_written(
    recorded: Cluster, settings: object
) -> None:
    now = timezone.now()
    read(recorded, now - timedelta(hours=25))
    read(recorded, now - timedelta(hours=1))
    read(recorded, now)  # GPU_USE_WINDOW_HOURS: 24
    assert sorted(GpuUseSample.objects.values_list("sampled_at", flat=True)) == [
        now - timedelta(hours=1),
        now,
    ]


def test_the_observe_task_reads_it_when_due_and_not_on_a_cluster_without_gpu_nodes(
    recorded: Cluster, kube_sim: KubeSimulator
) -> None:
    observe_cluster_kube(recorded.pk)
    observe_cluster_kube(recorded.pk)  # within GPU_USE_READ_SECONDS: not read again
    assert GpuUseSample.objects.count() == 1
    state = GpuUseState.objects.get(cluster=recorded)
    assert not gpu_use_due(recorded, now=state.looked_at + timedelta(seconds=299))
    assert gpu_use_due(recorded, now=state.looked_at + timedelta(seconds=300))

    kube_sim.clear_calls()
    GpuUseState.objects.all().delete()
    recorded.kube_nodes.update(gpu_capacity=0)
    recorded = Cluster.objects.get(pk=recorded.pk)
    assert not gpu_use_due(recorded, now=timezone.now())


def test_the_fake_exporter_refuses_a_gpu_it_cannot_read(kube_sim: KubeSimulator) -> None:
    kube_sim.cluster("prod")
    with pytest.raises(RuntimeError, match=r"400 .*node n1: a GPU that cannot be read"):
        kube_sim.dcgm("prod", {"n1": [{"uuid": "GPU-1"}]})  # no index


def test_a_location_shows_the_gpus_of_its_nodes_machines_adding_up_to_the_cluster(
    spanning: Cluster, kube_sim: KubeSimulator
) -> None:
    now = timezone.now()
    for n in range(3):  # the recording's 3 %, 0 %, 0 % on gpu-0; 40 % on remote-0's GPU 0
        read(spanning, now - (2 - n) * STEP)
    nl, de = Location.objects.get(name="nl-1"), Location.objects.get(name="de-1")
    clusters = Cluster.objects.all()

    def figures(location: Location) -> tuple[object, ...]:
        found = location_gpu_use(location, clusters=clusters)
        return (found.in_use, found.unused, found.idle, found.efficiency.percent)

    assert figures(nl) == (1, 0, 0, Decimal("1.0"))
    assert figures(de) == (1, 0, 1, Decimal("40.0"))
    # The overview's figures of the cluster are the locations' added up: 2 in use, 1 idle,
    # (3 + 0 + 0 + 3 * 40) / 6 reads held.
    state = GpuUseState.objects.get(cluster=spanning)
    assert (state.gpus_in_use, state.gpus_unused, state.gpus_idle) == (2, 0, 1)
    assert state.efficiency_percent == Decimal("20.5")
    # One function: each location's figures are gpu_use_summary of the GPUs there.
    use = gpu_use(spanning, now=now)
    (kept,) = location_gpu_use(de, clusters=clusters).clusters
    assert gpu_use_summary(use, location=de.pk) == {
        "efficiency_percent": kept.efficiency_percent, "held_samples": kept.held_samples,
        "used_percent_sum": kept.used_percent_sum, "gpus_in_use": kept.gpus_in_use,
        "gpus_unused": kept.gpus_unused, "gpus_idle": kept.gpus_idle,
    }  # fmt: skip
    assert (kept.held_samples, kept.used_percent_sum) == (3, 120)
    # Clusters the user does not see are not counted.
    nothing = location_gpu_use(nl, clusters=clusters.none())
    assert (nothing.has_data, nothing.clusters, nothing.efficiency.percent) == (False, [], None)


def test_gpus_of_a_node_that_is_no_machine_of_ours_are_in_no_location(
    spanning: Cluster, kube_sim: KubeSimulator
) -> None:
    now = timezone.now()
    read(spanning, now - STEP)
    assert set(GpuUseLocation.objects.values_list("location__name", flat=True)) == {
        "nl-1", "de-1",
    }  # fmt: skip
    Machine.objects.filter(name="remote-0").delete()  # its node owned by no machine now
    read(spanning, now)

    assert set(GpuUseLocation.objects.values_list("location__name", flat=True)) == {"nl-1"}
    state = GpuUseState.objects.get(cluster=spanning)
    assert state.gpus_in_use + state.gpus_idle == 3  # still the cluster's
