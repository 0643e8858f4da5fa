"""The `pods/eviction` subresource and PodDisruptionBudgets, held to the official client and
kubectl: a budget's status follows its pods, an eviction it does not allow is 429 with the
real server's Status, one it allows (or with no budget) deletes the pod gracefully, and
`kubectl drain` waits for a budget that first refuses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import requests

from capvco_web.integrations import kube
from capvco_web.integrations.kube.client import KubeClient
from tests.integrations.kube.test_client import allowing
from tests.kube_sim import KubeSimulator, SimCluster, node_object
from tests.kube_simulator.test_scheduler import KUBECTL, wait_for


@pytest.fixture
def cluster(scheduling: KubeSimulator) -> SimCluster:
    found = scheduling.cluster("prod")
    scheduling.put("prod", node_object("n1"))
    return found


@pytest.fixture
def policy(api_client: kubernetes.client.ApiClient) -> kubernetes.client.PolicyV1Api:
    return kubernetes.client.PolicyV1Api(api_client)


def web_pods(core: kubernetes.client.CoreV1Api, count: int) -> list[str]:
    """`count` pods of a ReplicaSet (as drain wants them), running and Ready."""
    names = [f"web-{n}" for n in range(count)]
    for name in names:
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1",
                 "controller": True}  # fmt: skip
        core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [owner]},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        )
    assert wait_for(
        lambda: all(core.read_namespaced_pod(n, "default").status.phase == "Running" for n in names)
    )
    return names


def budget(policy: kubernetes.client.PolicyV1Api, **spec: Any) -> None:
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        },
    )


def status_of(policy: kubernetes.client.PolicyV1Api) -> tuple[int, int, int, int]:
    found = policy.read_namespaced_pod_disruption_budget("web", "default").status
    return (
        found.expected_pods,
        found.current_healthy,
        found.desired_healthy,
        found.disruptions_allowed,
    )


def evict(core: kubernetes.client.CoreV1Api, name: str) -> None:
    eviction = kubernetes.client.V1Eviction(
        metadata=kubernetes.client.V1ObjectMeta(name=name, namespace="default")
    )
    core.create_namespaced_pod_eviction(name, "default", eviction)


def gone(core: kubernetes.client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, "default")
    except kubernetes.client.ApiException as exc:
        return exc.status == 404
    return False


@pytest.mark.parametrize(
    ("spec", "status"),
    [
        ({"minAvailable": 2}, (3, 3, 2, 1)),
        ({"minAvailable": "50%"}, (3, 3, 2, 1)),  # a percentage rounds up
        ({"maxUnavailable": 1}, (3, 3, 2, 1)),
        ({"maxUnavailable": "50%"}, (3, 3, 1, 2)),
    ],
)
def test_a_budgets_status_counts_its_pods(
    cluster: SimCluster,
    core: kubernetes.client.CoreV1Api,
    policy: kubernetes.client.PolicyV1Api,
    spec: dict[str, Any],
    status: tuple[int, int, int, int],
) -> None:
    web_pods(core, 3)

    budget(policy, **spec)

    assert wait_for(lambda: status_of(policy) == status)


def test_an_eviction_the_budget_refuses_is_429_then_allowed_it_deletes_gracefully(
    cluster: SimCluster, core: kubernetes.client.CoreV1Api, policy: kubernetes.client.PolicyV1Api
) -> None:
    web_pods(core, 2)
    budget(policy, minAvailable=2)
    assert wait_for(lambda: status_of(policy) == (2, 2, 2, 0))

    with pytest.raises(kubernetes.client.ApiException) as refused:
        evict(core, "web-0")

    assert refused.value.status == 429
    assert json.loads(refused.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
                }
            ]
        },
        "code": 429,
    }
    assert core.read_namespaced_pod("web-0", "default").metadata.deletion_timestamp is None

    policy.patch_namespaced_pod_disruption_budget("web", "default", {"spec": {"minAvailable": 1}})
    assert wait_for(lambda: status_of(policy)[3] == 1)
    evict(core, "web-0")

    terminating = core.read_namespaced_pod("web-0", "default")
    assert terminating.metadata.deletion_timestamp is not None  # graceful: marked, then gone
    assert status_of(policy) == (2, 1, 1, 0)  # the disruption is spent
    assert wait_for(lambda: gone(core, "web-0"))
    with pytest.raises(kubernetes.client.ApiException) as again:
        evict(core, "web-1")
    assert again.value.status == 429


def test_an_eviction_without_a_budget_is_201_and_the_pod_goes(
    cluster: SimCluster, core: kubernetes.client.CoreV1Api
) -> None:
    web_pods(core, 1)

    answer = requests.post(
        f"{cluster.server}/api/v1/namespaces/default/pods/web-0/eviction",
        json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0"}},
        headers={"Authorization": f"Bearer {cluster.token}"},
        verify=cluster.ca_file,
        timeout=10,
    )

    assert answer.status_code == 201
    assert answer.json()["status"] == "Success"
    assert wait_for(lambda: gone(core, "web-0"))


@pytest.fixture
def kubectl_env(cluster: SimCluster, tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "KUBECONFIG": str(cluster.kubeconfig_file(tmp_path))}


def test_kubectl_drain_waits_for_a_budget_that_first_refuses(
    scheduling: KubeSimulator,
    cluster: SimCluster,
    core: kubernetes.client.CoreV1Api,
    policy: kubernetes.client.PolicyV1Api,
    kubectl_env: dict[str, str],
) -> None:
    web_pods(core, 2)
    budget(policy, minAvailable=2)
    drain = [KUBECTL, "drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data",
             "--timeout=60s"]  # fmt: skip

    draining = subprocess.Popen(
        drain, env=kubectl_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    refused = wait_for(
        lambda: any(
            call["operation"] == "create pods/eviction" and call["status"] == 429
            for call in scheduling.calls("prod")
        )
    )
    assert refused
    assert core.read_node("n1").spec.unschedulable is True  # cordoned first
    policy.patch_namespaced_pod_disruption_budget("web", "default", {"spec": {"minAvailable": 0}})
    output, _ = draining.communicate(timeout=60)

    assert draining.returncode == 0, output
    assert "Cannot evict pod as it would violate the pod's disruption budget." in output
    assert "node/n1 drained" in output
    assert gone(core, "web-0") and gone(core, "web-1")
    done = subprocess.run(
        [KUBECTL, "uncordon", "n1"], env=kubectl_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not core.read_node("n1").spec.unschedulable


def test_the_control_planes_client_cordons_and_evicts_as_kubectl_reads_it(
    scheduling: KubeSimulator,
    cluster: SimCluster,
    core: kubernetes.client.CoreV1Api,
    policy: kubernetes.client.PolicyV1Api,
    kubectl_env: dict[str, str],
) -> None:
    """The autoscaler's calls (capvco_web.integrations.kube: cordon_node, evict_pod), read
    back by kubectl and the official client: a cordon is what `kubectl cordon` makes, a
    refused eviction is TooManyRequests and leaves the pod, an allowed one removes it; a
    DaemonSet's pod is told apart as the drain leaves it."""
    web_pods(core, 1)
    budget(policy, minAvailable=1)

    def nodes_shown() -> str:
        shown = subprocess.run(
            [KUBECTL, "get", "node", "n1"], env=kubectl_env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        return shown.stdout

    with KubeClient.from_text(cluster.kubeconfig_yaml, allowed_servers=allowing(cluster)) as ours:
        cordoned = ours.cordon_node("n1")
        assert cordoned.unschedulable
        assert "SchedulingDisabled" in nodes_shown()
        with pytest.raises(kube.TooManyRequests):
            ours.evict_pod(namespace="default", name="web-0")
        assert core.read_namespaced_pod("web-0", "default").metadata.deletion_timestamp is None

        policy.patch_namespaced_pod_disruption_budget(
            "web", "default", {"spec": {"minAvailable": 0}}
        )
        ours.evict_pod(namespace="default", name="web-0")
        assert wait_for(lambda: gone(core, "web-0"))
        with pytest.raises(kube.NotFound):
            ours.evict_pod(namespace="default", name="web-0")

        assert not ours.cordon_node("n1", unschedulable=False).unschedulable
        assert "SchedulingDisabled" not in nodes_shown()
        assert core.read_node("n1").spec.unschedulable is None
