"""Each GPU node verified by a pod that uses its GPUs: the Job the plan makes, the verdict
judged from its pod, the Job removed, the label, the API, the alert. The official client
against the fake API server over HTTP, through the observe task."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from capvco_web.models import AuditEvent
from clusters.models import Cluster, MachinePool
from kube.client import kube_client
from kube.gpu_verify import NODE_UID_LABEL, SELECTOR, VERIFIED_LABEL, verdict_of_log
from kube.models import GpuVerification, GpuVerifyJob, GpuVerifyRequest, KubeNode
from kube.observe import cluster_kube_observe
from kube.plan import VERIFY_JOB_DELETE, VERIFY_START, kube_plan
from kube.tasks import observe_cluster_kube, observe_kube_all
from notify.alerts import alerts_collect
from notify.models import Reason
from tests.factories import GpuProfileFactory, MembershipFactory, VgpuReservationFactory
from tests.kube_sim import KubeSimulator, SimCluster, node_object
from tests.test_one_writer import writers

GPU_0, GPU_1 = "capvco-prod-gpu-0", "capvco-prod-gpu-1"
NAMESPACE = "capvco-gpu-verify"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
Status = GpuVerification.Status


@pytest.fixture
def verify_on(settings: Any) -> None:
    settings.GPU_VERIFY = True


@pytest.fixture
def gpus(pool: MachinePool) -> None:
    """Each machine of pool `gpu` (T4 x 1) has one vGPU attached, on a Tesla T4 card."""
    location = pool.site.location
    GpuProfileFactory(location=location, profile_id="card-t4", model="Tesla T4 (0000:3b:00.0)")
    for machine in pool.machines.all():
        VgpuReservationFactory(machine=machine, location=location, gpu_id="card-t4")


@pytest.fixture
def sim_cluster(
    kube_sim: KubeSimulator, pool: MachinePool, gpus: None, verify_on: None
) -> SimCluster:
    found = kube_sim.cluster("prod")
    # batch/v1 Jobs served as a registered kind: stored, listed by label, deleted; their
    # pods are what a kubelet would write, put by the tests (K8s.pod_ends).
    kube_sim.register(
        "prod", group="batch", version="v1", plural="jobs", kind="Job", namespaced=True
    )
    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig=found.kubeconfig_yaml)
    kube_sim.put(
        "prod",
        node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1),
        node_object("cp-0", labels={"node-role.kubernetes.io/control-plane": ""}),
    )
    return found


def run(pool: MachinePool) -> None:
    observe_cluster_kube(pool.cluster_id)


class K8s:
    """The simulated cluster as the official client reads and changes it (plain JSON)."""

    def __init__(self, kube_sim: KubeSimulator, found: SimCluster) -> None:
        api = kubernetes.config.new_client_from_config_dict(found.kubeconfig)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.core = kubernetes.client.CoreV1Api(api)
        self.sim = kube_sim

    def jobs(self) -> list[dict[str, Any]]:
        """Our verification Jobs in the cluster."""
        found = self.custom.list_namespaced_custom_object(
            "batch", "v1", NAMESPACE, "jobs", label_selector=SELECTOR
        )
        return list(found["items"])

    def job_delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object("batch", "v1", NAMESPACE, "jobs", name)

    def pod_ends(self, job: dict[str, Any], *, phase: str, **status: Any) -> None:
        """What the kubelet makes of the Job's pod: it ended (`phase`) with `status`."""
        name = job["metadata"]["name"]
        template = job["spec"]["template"]
        self.sim.put(
            "prod",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-x7k2p",
                    "namespace": NAMESPACE,
                    "labels": {**template["metadata"]["labels"], "job-name": name},
                },
                "spec": template["spec"],
                "status": {"phase": phase, **status},
            },
        )


@pytest.fixture
def k8s(kube_sim: KubeSimulator, sim_cluster: SimCluster) -> K8s:
    return K8s(kube_sim, sim_cluster)


def verdicts() -> list[tuple[str, str]]:
    return list(GpuVerification.objects.order_by("pk").values_list("node_name", "status"))


# ---- the Job --------------------------------------------------------------------------


def test_a_node_that_advertises_gpus_gets_one_job_pinned_to_it_holding_all_its_gpus(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)

    (job,) = k8s.jobs()
    node = KubeNode.objects.get(name=GPU_0)
    spec = job["spec"]
    pod = spec["template"]["spec"]
    assert job["metadata"]["labels"][NODE_UID_LABEL] == node.uid
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (0, 600)
    assert (pod["nodeName"], pod["restartPolicy"]) == (GPU_0, "Never")
    assert pod["tolerations"] == [{"operator": "Exists"}]
    (container,) = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    assert container["command"][0] == "nvidia-smi"
    assert "--format=csv,noheader,nounits" in container["command"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert verdicts() == [(GPU_0, Status.RUNNING)]
    assert {"POST /api/v1/namespaces", f"POST {JOBS}"} <= {
        f"{c['method']} {c['path']}" for c in kube_sim.calls("prod")
    }

    run(pool)  # the pod still runs: nothing more
    assert len(k8s.jobs()) == 1
    assert verdicts() == [(GPU_0, Status.RUNNING)]


def test_the_cuda_sample_runs_after_nvidia_smi_on_the_same_gpus(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, settings: Any
) -> None:
    settings.GPU_VERIFY_CUDA_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    run(pool)

    pod = k8s.jobs()[0]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["probe"]
    assert [c["image"] for c in pod["containers"]] == [settings.GPU_VERIFY_CUDA_IMAGE]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_never_on_a_node_of_a_pool_without_gpus(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    MachinePool.objects.filter(pk=pool.pk).update(gpu_count=0, gpu_type="")
    run(pool)
    run(pool)

    # Nor is the namespace listed: a cluster without GPU pools costs no call.
    assert not [c for c in kube_sim.calls("prod") if NAMESPACE in c["path"]]
    assert k8s.jobs() == []
    assert verdicts() == []


def test_a_node_that_advertises_no_gpu_yet_is_not_verified_yet(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    kube_sim.put("prod", node_object(GPU_0, provider_id="vco://nl-1/100"))
    run(pool)
    assert k8s.jobs() == []

    kube_sim.put("prod", node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1))
    run(pool)
    assert len(k8s.jobs()) == 1


def test_the_setting_off_makes_nothing_and_calls_nothing(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, settings: Any
) -> None:
    settings.GPU_VERIFY = False
    run(pool)
    run(pool)

    assert not [c for c in kube_sim.calls("prod") if NAMESPACE in c["path"]]
    assert k8s.jobs() == []
    assert verdicts() == []


# ---- failed: the pod's own reason ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (
            # The kubelet's admission: the device plugin has fewer GPUs than the pod holds.
            {
                "reason": "OutOfnvidia.com/gpu",
                "message": "Pod Node didn't have enough resource: nvidia.com/gpu, requested: 1, "
                "used: 1, capacity: 1",
            },
            "OutOfnvidia.com/gpu: Pod Node didn't have enough resource: nvidia.com/gpu",
        ),
        (
            # No driver: the toolkit mounts no nvidia-smi, the container cannot start it.
            {
                "containerStatuses": [
                    {
                        "name": "probe",
                        "state": {
                            "terminated": {
                                "exitCode": 127,
                                "reason": "ContainerCannotRun",
                                "message": 'exec: "nvidia-smi": executable file not found in $PATH',
                            }
                        },
                    }
                ]
            },
            'ContainerCannotRun: exit code 127: exec: "nvidia-smi"',
        ),
    ],
    ids=["out-of-gpus", "no-driver"],
)
def test_a_pod_that_did_not_run_fails_the_verification_with_its_own_reason(
    kube_sim: KubeSimulator,
    k8s: K8s,
    pool: MachinePool,
    status: dict[str, Any],
    said: str,
) -> None:
    run(pool)
    k8s.pod_ends(k8s.jobs()[0], phase="Failed", **status)
    run(pool)

    verification = GpuVerification.objects.get()
    assert verification.status == Status.FAILED
    assert said in verification.reasons[0]
    assert verification.finished_at is not None
    assert k8s.jobs() == []  # deleted once read


def test_an_image_never_pulled_fails_when_the_api_server_ends_the_job(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    job = k8s.jobs()[0]
    waiting = {
        "containerStatuses": [
            {
                "name": "probe",
                "state": {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": 'failed to pull image "nvcr.io/nvidia/cuda": not found',
                    }
                },
            }
        ]
    }
    k8s.pod_ends(job, phase="Pending", **waiting)
    run(pool)
    assert verdicts() == [(GPU_0, Status.RUNNING)]  # it may still be pulled

    # activeDeadlineSeconds passed: the Job controller marks the Job failed.
    job["status"] = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified deadline",
            }
        ]
    }
    kube_sim.put("prod", job)
    run(pool)

    verification = GpuVerification.objects.get()
    assert verification.status == Status.FAILED
    assert verification.reasons == [
        "the pod did not finish within 600 s (ErrImagePull: failed to pull image "
        '"nvcr.io/nvidia/cuda": not found)'
    ]
    assert k8s.jobs() == []


def test_a_pod_that_never_starts_fails_after_the_timeout(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, settings: Any
) -> None:
    """Even when nothing in the cluster ends the Job (no Job controller), the control plane
    does not wait for ever."""
    run(pool)
    k8s.pod_ends(k8s.jobs()[0], phase="Pending", reason="", message="")
    GpuVerification.objects.update(
        started_at=timezone.now()
        - timezone.timedelta(seconds=settings.GPU_VERIFY_TIMEOUT_SECONDS + 600)
    )
    run(pool)

    (verification,) = GpuVerification.objects.all()
    assert verification.status == Status.FAILED
    assert verification.reasons[0].startswith("the pod did not finish within 600 s")
    assert k8s.jobs() == []


# ---- once per incarnation, and again on request ------------------------------------------


def _fail(k8s: K8s, pool: MachinePool) -> None:
    k8s.pod_ends(k8s.jobs()[0], phase="Failed", reason="OutOfnvidia.com/gpu")
    run(pool)


def test_a_node_is_verified_once_per_incarnation_and_again_when_it_restarts(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    _fail(k8s, pool)
    run(pool)
    run(pool)
    assert k8s.jobs() == []  # judged: not again for this uid
    assert verdicts() == [(GPU_0, Status.FAILED)]

    # The node restarts as a new Node object: a new uid.
    first_uid = KubeNode.objects.get(name=GPU_0).uid
    k8s.core.delete_node(GPU_0)
    run(pool)
    kube_sim.put("prod", node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1))
    run(pool)

    assert KubeNode.objects.get(name=GPU_0).uid != first_uid
    (job,) = k8s.jobs()
    assert job["metadata"]["labels"][NODE_UID_LABEL] == KubeNode.objects.get(name=GPU_0).uid
    assert verdicts() == [(GPU_0, Status.FAILED), (GPU_0, Status.RUNNING)]


def test_an_operator_asks_again_and_a_new_job_answers_the_request(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, api: APIClient
) -> None:
    run(pool)
    _fail(k8s, pool)
    node = KubeNode.objects.get(name=GPU_0)

    answer = api.post(
        f"/api/v1/nodes/{node.pk}/verify/", {"reason": "driver updated"}, format="json"
    )

    assert answer.status_code == 202, answer.content
    assert answer.json()["gpu_verification"] == "failed"
    (event,) = AuditEvent.objects.filter(action="kube_node.gpu_verify_request")
    assert (event.actor_name, event.reason) == ("ops", "driver updated")
    refused = api.post(f"/api/v1/nodes/{node.pk}/verify/", {"reason": "again"}, format="json")
    assert refused.status_code == 409
    assert "asked for already" in refused.json()["detail"]

    run(pool)
    (job,) = k8s.jobs()
    assert job["metadata"]["name"].endswith("-2")
    request = GpuVerifyRequest.objects.get()
    assert GpuVerification.objects.get(request=request).status == Status.RUNNING
    refused = api.post(f"/api/v1/nodes/{node.pk}/verify/", {"reason": "again"}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (409, "verify_refused")
    assert "being verified now" in refused.json()["detail"]


def test_a_request_is_refused_with_a_clear_error(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, api: APIClient
) -> None:
    run(pool)
    control_plane = KubeNode.objects.get(name="cp-0")

    no_reason = api.post(f"/api/v1/nodes/{control_plane.pk}/verify/", {}, format="json")
    not_gpu = api.post(
        f"/api/v1/nodes/{control_plane.pk}/verify/", {"reason": "check"}, format="json"
    )

    assert no_reason.status_code == 400
    assert no_reason.json()["fields"] == {"reason": ["This field is required."]}
    assert not_gpu.status_code == 409
    assert "not a node of a GPU pool" in not_gpu.json()["detail"]
    assert not AuditEvent.objects.filter(action="kube_node.gpu_verify_request").exists()


def test_a_viewer_may_not_ask(kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool) -> None:
    run(pool)
    _fail(k8s, pool)
    viewer = MembershipFactory(account=pool.cluster.account, role="viewer").user
    operator = MembershipFactory(account=pool.cluster.account, role="operator").user
    node = KubeNode.objects.get(name=GPU_0)
    client = APIClient()

    client.force_authenticate(viewer)
    assert (
        client.post(f"/api/v1/nodes/{node.pk}/verify/", {"reason": "x"}, format="json").status_code
        == 403
    )
    client.force_authenticate(operator)
    assert (
        client.post(f"/api/v1/nodes/{node.pk}/verify/", {"reason": "x"}, format="json").status_code
        == 202
    )


# ---- no Job left behind ------------------------------------------------------------------


def test_a_worker_killed_between_making_the_job_and_reading_it_ends_with_one_verdict_and_no_job(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    run(pool)  # mirrors the node: the plan of the next pass starts a verification
    GpuVerification.objects.all().delete()
    for job in k8s.jobs():
        k8s.job_delete(job["metadata"]["name"])
    run(pool)
    # The pass made the row and the Job; its worker died before it wrote "running".
    GpuVerification.objects.update(status=Status.PENDING)
    k8s.pod_ends(k8s.jobs()[0], phase="Failed", reason="OutOfnvidia.com/gpu")
    run(pool)
    # ... and this one read it and recorded the verdict, but died before deleting the Job.
    assert verdicts() == [(GPU_0, Status.FAILED)]

    run(pool)
    run(pool)

    assert verdicts() == [(GPU_0, Status.FAILED)]
    assert k8s.jobs() == []
    assert kube_plan(Cluster.objects.get(pk=cluster.pk)) == []


def test_a_job_of_ours_that_no_verification_names_is_deleted(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    GpuVerification.objects.all().delete()  # as if the database was restored from before
    GpuVerification.objects.create(
        cluster_id=pool.cluster_id,
        node_name=GPU_0,
        node_uid=KubeNode.objects.get(name=GPU_0).uid,
        status=Status.FAILED,
        job_name="gpu-verify-old-1",
        started_at=timezone.now(),
    )
    run(pool)
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    assert [s.kind for s in kube_plan(cluster)] == [VERIFY_JOB_DELETE]

    run(pool)
    assert k8s.jobs() == []
    assert not GpuVerifyJob.objects.exists()


def test_no_decision_from_a_partial_listing_of_the_jobs(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    k8s.pod_ends(k8s.jobs()[0], phase="Failed", reason="OutOfnvidia.com/gpu")
    kube_sim.fault(operation="list pods", status=503, skip=1)  # the namespace's pods
    run(pool)

    cluster = Cluster.objects.get(pk=pool.cluster_id)
    assert [s.kind for s in kube_plan(cluster) if s.kind.startswith("gpu_verify")] == []
    assert verdicts() == [(GPU_0, Status.RUNNING)]
    kube_sim.clear_faults()
    assert len(k8s.jobs()) == 1

    run(pool)
    assert verdicts() == [(GPU_0, Status.FAILED)]
    assert k8s.jobs() == []


# ---- where the verdict shows -------------------------------------------------------------


def _verdict(node: KubeNode, status: str, *reasons: str) -> GpuVerification:
    """A verdict as act records it."""
    return GpuVerification.objects.create(
        cluster_id=node.cluster_id,
        node_name=node.name,
        node_uid=node.uid,
        status=status,
        reasons=list(reasons),
        job_name=f"gpu-verify-{node.uid}-{GpuVerification.objects.count() + 1}",
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )


def test_a_verified_node_is_labelled_and_loses_the_label_when_a_later_verdict_is_not(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    k8s.job_delete(k8s.jobs()[0]["metadata"]["name"])
    node = KubeNode.objects.get(name=GPU_0)
    GpuVerification.objects.update(status=Status.VERIFIED, finished_at=timezone.now())

    run(pool)
    assert k8s.core.read_node(GPU_0).metadata.labels[VERIFIED_LABEL] == "true"
    kube_sim.clear_calls()
    run(pool)  # right as it is: no patch
    assert not [c for c in kube_sim.calls("prod") if c["method"] == "PATCH"]

    _verdict(node, Status.MISMATCH, "billed 1 x Tesla T4, the node sees 1 x NVIDIA A10")
    run(pool)
    assert VERIFIED_LABEL not in k8s.core.read_node(GPU_0).metadata.labels
    assert "capvco.io/gpu-type" in k8s.core.read_node(GPU_0).metadata.labels


def test_not_verified_is_told_once_per_node_incarnation_and_counted_on_metrics(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, settings: Any
) -> None:
    run(pool)
    _fail(k8s, pool)
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    node = KubeNode.objects.get(name=GPU_0)

    found = alerts_collect(now=timezone.now(), account_ids=[cluster.account_id]).found
    (alert,) = [a for a in found if a.reason == Reason.GPU_NODE_NOT_VERIFIED]
    assert alert.key == f"{cluster.pk}:{node.uid}"
    assert alert.details["verdict"] == "failed"
    assert "OutOfnvidia.com/gpu" in alert.summary

    settings.METRICS_TOKEN = "scrape"
    text = Client(HTTP_AUTHORIZATION="Bearer scrape").get("/metrics").content.decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "capvco_gpu_nodes"]
    held = {s.labels["verdict"]: s.value for s in family.samples}
    assert held["failed"] == 1
    assert held["verified"] == held["none"] == 0

    _verdict(node, Status.VERIFIED)
    found = alerts_collect(now=timezone.now(), account_ids=[cluster.account_id]).found
    assert not [a for a in found if a.reason == Reason.GPU_NODE_NOT_VERIFIED]


def test_the_verdict_is_on_the_node_and_cluster_pages(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, admin_client: Client
) -> None:
    run(pool)
    _fail(k8s, pool)

    for url in (f"/clusters/{pool.cluster_id}/", "/nodes/"):
        page = admin_client.get(url).content.decode()
        assert "A pod sees the GPUs" in page
        assert "OutOfnvidia.com/gpu" in page, url


def test_each_verification_table_has_one_writer(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, api: APIClient
) -> None:
    """The request is the person's (its service), the verification act's, the Jobs as
    listed the mirror's (tests/test_one_writer.py holds the rest of the map)."""
    with writers() as seen:
        run(pool)
        _fail(k8s, pool)
        node = KubeNode.objects.get(name=GPU_0)
        api.post(f"/api/v1/nodes/{node.pk}/verify/", {"reason": "again"}, format="json")
        run(pool)
        run(pool)

    assert {
        table: modules - {"(tests)"} for table, modules in seen.items() if "verif" in table
    } == {
        "kube_gpuverifyrequest": {"kube/gpu_verify_requests.py"},
        "kube_gpuverification": {"kube/gpu_verify.py"},
        "kube_gpuverifyjob": {"kube/gpu_verify.py"},
    }


def test_an_operator_asks_again_from_the_page(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, admin_client: Client
) -> None:
    run(pool)
    _fail(k8s, pool)
    node = KubeNode.objects.get(name=GPU_0)
    url = f"/nodes/{node.pk}/verify/"
    assert url in admin_client.get(f"/clusters/{pool.cluster_id}/").content.decode()

    empty = admin_client.post(url, {"reason": " "})
    asked = admin_client.post(url, {"reason": "new driver"})
    again = admin_client.post(url, {"reason": "new driver"})

    assert empty.status_code == 400
    assert asked.status_code == 302
    assert again.status_code == 409
    assert "asked for already" in again.content.decode()
    assert GpuVerifyRequest.objects.get().reason == "new driver"


def test_a_node_gone_before_its_job_was_read_ends_failed_and_its_job_deleted(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    k8s.core.delete_node(GPU_0)
    run(pool)
    assert k8s.jobs() == []
    assert GpuVerification.objects.get().status == Status.FAILED

    # ... also when its Job is gone too (deleted by someone).
    kube_sim.put("prod", node_object(GPU_0, provider_id="vco://nl-1/100", gpus=1))
    run(pool)
    k8s.job_delete(k8s.jobs()[0]["metadata"]["name"])
    k8s.core.delete_node(GPU_0)
    run(pool)
    run(pool)

    verification = GpuVerification.objects.order_by("pk").last()
    assert verification is not None
    assert verification.status == Status.FAILED
    assert "left the cluster" in verification.reasons[0]
    assert k8s.jobs() == []


# ---- the verdict on what nvidia-smi printed ------------------------------------------------

# The H200 node's recording (../shared/gpu-node/query-gpu-noheader.csv) as the Job's query
# prints it: the same values, with the MIG mode the query adds.
H200_LOG = (
    "0, NVIDIA H200, GPU-a54cc8e3-5c0b-336d-1a96-de062f90b427, 00000000:00:06.0, "
    "580.159.04, 143771, Disabled, 9.0\n"
)


def test_the_log_of_an_h200_node_verifies_it_and_keeps_what_its_pods_see() -> None:
    verdict = verdict_of_log(H200_LOG, count=1, gpu_type="NVIDIA H200", driver="550.54.15")

    assert (verdict.status, verdict.reasons) == (Status.VERIFIED, [])
    assert verdict.gpus == [
        {
            "index": 0,
            "model": "NVIDIA H200",
            "memory_mib": 143771,
            "driver": "580.159.04",
            "uuid": "GPU-a54cc8e3-5c0b-336d-1a96-de062f90b427",
            "pci_bus_id": "00000000:00:06.0",
            "mig_mode": "Disabled",
            "compute_cap": "9.0",
        }
    ]


@pytest.mark.parametrize(
    ("billed", "said"),
    [
        (
            {"count": 2, "gpu_type": "NVIDIA H200"},
            "billed NVIDIA H200 x 2, the node sees 1 x NVIDIA H200",
        ),
        (
            {"count": 1, "gpu_type": "NVIDIA A100"},
            "billed NVIDIA A100 x 1, the node sees 1 x NVIDIA H200",
        ),
        (
            {"count": 1, "gpu_type": "NVIDIA H200", "driver": "590.1"},
            "driver 580.159.04 is older than the pool's 590.1",
        ),
    ],
    ids=["count", "model", "driver"],
)
def test_a_log_that_differs_from_the_bill_is_a_mismatch_with_both_sides(
    billed: dict[str, Any], said: str
) -> None:
    verdict = verdict_of_log(H200_LOG, **{"driver": "", **billed})

    assert (verdict.status, verdict.reasons) == (Status.MISMATCH, [said])


def test_a_log_that_is_not_the_query_fails_the_verification() -> None:
    verdict = verdict_of_log(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        count=1,
        gpu_type="NVIDIA H200",
        driver="",
    )

    assert verdict.status == Status.FAILED
    assert verdict.reasons[0].startswith("nvidia-smi's output cannot be read: ")


# ---- a reconciler's manners ----------------------------------------------------------------


def test_a_pass_after_the_verdict_writes_nothing_but_the_stamp(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    _fail(k8s, pool)
    run(pool)
    kube_sim.clear_calls()

    with CaptureQueriesContext(connection) as queries:
        run(pool)

    assert [c for c in kube_sim.calls("prod") if c["method"] != "GET"] == []
    written = [
        q["sql"].split(" SET ")[0]
        for q in queries.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))
    ]
    assert written == ['UPDATE "kube_clusterobservation"']


def test_a_job_whose_create_failed_is_made_again_by_the_next_pass(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    kube_sim.fault(operation="create jobs", status=503, times=1)
    run(pool)
    assert verdicts() == [(GPU_0, Status.PENDING)]  # recorded before the call
    assert k8s.jobs() == []

    run(pool)

    (job,) = k8s.jobs()
    assert job["metadata"]["name"] == GpuVerification.objects.get().job_name
    assert verdicts() == [(GPU_0, Status.RUNNING)]


def test_a_job_made_whose_answer_was_lost_is_read_not_made_twice(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    kube_sim.fault(operation="create jobs", lost_response="drop", times=1)
    run(pool)
    assert len(k8s.jobs()) == 1
    assert verdicts() == [(GPU_0, Status.PENDING)]

    k8s.pod_ends(k8s.jobs()[0], phase="Failed", reason="OutOfnvidia.com/gpu")
    run(pool)

    assert verdicts() == [(GPU_0, Status.FAILED)]
    assert k8s.jobs() == []


def test_the_dry_run_shows_the_verification_steps_with_their_calls(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool, api: APIClient
) -> None:
    kube_sim.fault(operation="create jobs", status=503, times=1)
    run(pool)
    cluster = Cluster.objects.get(pk=pool.cluster_id)
    with kube_client(cluster) as client:
        cluster_kube_observe(client=client, cluster=cluster)  # observed, not acted on

    answer = api.get(f"/api/v1/clusters/{pool.cluster_id}/plan/")

    assert answer.status_code == 200
    (step,) = [s for s in answer.json() if s["action"] == VERIFY_START]
    assert GPU_0 in step["description"]
    assert {"service": "kubernetes", "verb": "POST", "object": JOBS, "maybe": False} in step[
        "calls"
    ]


def test_a_cluster_whose_kubeconfig_is_removed_forgets_its_jobs_as_listed_not_its_verdicts(
    kube_sim: KubeSimulator, k8s: K8s, pool: MachinePool
) -> None:
    run(pool)
    _fail(k8s, pool)
    run(pool)  # the Job's gone; start another so that one is mirrored
    node = KubeNode.objects.get(name=GPU_0)
    GpuVerifyRequest.objects.create(
        cluster_id=pool.cluster_id,
        node_name=node.name,
        node_uid=node.uid,
        reason="again",
        requested_at=timezone.now(),
    )
    run(pool)
    run(pool)
    assert GpuVerifyJob.objects.exists()

    Cluster.objects.filter(pk=pool.cluster_id).update(kubeconfig="")
    observe_kube_all()

    assert not GpuVerifyJob.objects.exists()
    assert verdicts() == [(GPU_0, Status.FAILED), (GPU_0, Status.RUNNING)]
