"""Faults, the call log, and the simulator as a process of its own."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from kubernetes.client import ApiException, CoreV1Api

from tests.kube_sim import PROJECT_ROOT, KubeSimulator, SimCluster, node_object


def test_a_fault_fires_after_skip_for_its_times_on_its_operation_only(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", node_object("n1"))
    # 500: a 503 carries Retry-After, which urllib3 (under the official client) retries.
    kube_sim.fault(operation="get nodes", status=500, skip=1, times=1)

    core.read_node("n1")
    with pytest.raises(ApiException) as failed:
        core.read_node("n1")
    core.read_node("n1")
    core.list_node()

    assert failed.value.status == 500
    calls = [(c["operation"], c["status"]) for c in kube_sim.calls("prod")]
    assert calls == [
        ("get nodes", 200), ("get nodes", 500), ("get nodes", 200), ("list nodes", 200),
    ]  # fmt: skip
    assert [(f["seen"], f["fired"]) for f in kube_sim.faults()] == [(2, 1)]


def test_a_fault_of_another_cluster_does_not_fire(core: CoreV1Api, kube_sim: KubeSimulator) -> None:
    kube_sim.cluster("other")
    kube_sim.fault(operation="list nodes", cluster="other", status=500)

    assert core.list_node().items == []


def test_a_lost_answer_is_logged_without_a_status_and_the_change_is_made(
    core: CoreV1Api, kube_sim: KubeSimulator
) -> None:
    kube_sim.put("prod", node_object("n1"))
    kube_sim.fault(operation="patch nodes", lost_response="drop", times=1)

    with pytest.raises(Exception):  # noqa: B017 - the client's own connection error
        core.patch_node("n1", {"metadata": {"labels": {"x": "y"}}})

    assert core.read_node("n1").metadata.labels["x"] == "y"
    assert kube_sim.calls("prod")[0]["status"] is None


def test_a_fault_that_cannot_be_is_refused(kube_sim: KubeSimulator) -> None:
    with pytest.raises(RuntimeError, match="lost_response"):
        kube_sim.fault(operation="list pods", lost_response="sometimes")
    with pytest.raises(RuntimeError, match="operation"):
        kube_sim.fault(status=500)


def test_the_process_serves_the_clusters_it_was_started_with_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator.kube", "--port", "0", "--cluster", "demo"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        base = process.stdout.readline().rsplit("listening on ", 1)[1].strip()
        ca_file = process.stdout.readline().rsplit("CA certificate: ", 1)[1].strip()
        found = requests.get(f"{base}/_sim/clusters/demo", timeout=5, verify=ca_file).json()
        cluster = found["kubeconfig"]["clusters"][0]["cluster"]
        (tmp_path / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        nodes = requests.get(
            f"{found['server']}/api/v1/nodes",
            headers={"Authorization": f"Bearer {found['token']}"},
            timeout=5,
            verify=str(tmp_path / "ca.crt"),  # the CA the kubeconfig hands out
        )
        assert base.startswith("https://")
        written = json.loads((Path(ca_file).parent / "demo.kubeconfig").read_text())
        assert written == found["kubeconfig"]
        assert nodes.json()["kind"] == "NodeList"
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"{base}/_sim/clusters", timeout=5, verify=True)  # not a public CA
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=10)
    assert process.returncode == 0
    assert "kube simulator stopped" in out


def test_a_call_delayed_past_a_reset_is_not_in_the_new_call_log_nor_acts(
    kube_sim: KubeSimulator,
) -> None:
    """A test that timed out on a slow create leaves the call asleep in the fake; the next
    test's reset must not receive it (the whitesky simulator holds the same rule)."""
    cluster = kube_sim.cluster("prod")
    kube_sim.fault(operation="create namespaces", latency_ms=600)
    late = threading.Thread(target=_create_namespace, args=(cluster,))
    late.start()
    time.sleep(0.2)  # the call is in the fake, asleep in its latency
    kube_sim.reset()
    fresh = kube_sim.cluster("prod")
    late.join()

    assert kube_sim.calls() == []  # a complete call log taken after the late call ended
    names = requests.get(
        f"{fresh.server}/api/v1/namespaces",
        headers={"Authorization": f"Bearer {fresh.token}"},
        verify=fresh.ca_file,
        timeout=10,
    ).json()["items"]
    assert "late" not in {n["metadata"]["name"] for n in names}


def _create_namespace(cluster: SimCluster) -> None:
    with contextlib.suppress(requests.RequestException):  # dropped: what a reset does to it
        requests.post(
            f"{cluster.server}/api/v1/namespaces",
            json={"metadata": {"name": "late"}},
            headers={"Authorization": f"Bearer {cluster.token}"},
            verify=cluster.ca_file,
            timeout=10,
        )
