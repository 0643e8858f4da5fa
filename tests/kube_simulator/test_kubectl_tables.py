"""`kubectl get` prints the columns a real API server gives it: the simulator answers the
Table it asks for (server-side printing) for nodes and pods, as kube-apiserver does, so
that an operator reads STATUS, ROLES, VERSION of nodes and READY, STATUS, RESTARTS, NODE
of pods, not only NAME and AGE."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.kube_sim import KubeSimulator, node_object, pod_object

# Real kubectl, a third-party runtime, holds the fake API server to its contract.
pytestmark = pytest.mark.contract

KUBECTL = "/usr/bin/kubectl"


def _kubectl(env: dict[str, str], *args: str) -> list[list[str]]:
    """kubectl's output, each line split into its columns (two spaces or more apart)."""
    done = subprocess.run(
        [KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stdout.strip().splitlines()
    return [[cell for cell in line.split("  ") if cell.strip()] for line in lines]


def _stripped(rows: list[list[str]]) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in rows]


@pytest.fixture
def env(kube_sim: KubeSimulator, tmp_path: Path) -> dict[str, str]:
    cluster = kube_sim.cluster("prod")
    control = node_object("cp-0", labels={"node-role.kubernetes.io/control-plane": ""})
    cordoned = node_object("gpu-1", ready=False, kubelet_version="v1.32.4")
    cordoned["spec"]["unschedulable"] = True
    cordoned["status"]["addresses"] = [{"type": "InternalIP", "address": "10.0.0.11"}]
    running = pod_object("train", namespace="ml", node="gpu-1")
    running["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    running["status"] = {
        "phase": "Running",
        "podIP": "10.244.1.7",
        "containerStatuses": [
            {"name": "main", "ready": True, "restartCount": 2, "state": {"running": {}}},
            {
                "name": "sidecar",
                "ready": False,
                "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            },
        ],
    }
    kube_sim.put("prod", control, cordoned, running, pod_object("queued", namespace="ml"))
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(cluster.kubeconfig_file(tmp_path)),
    }


def test_kubectl_get_nodes_shows_status_roles_and_version(env: dict[str, str]) -> None:
    rows = _stripped(_kubectl(env, "get", "nodes"))

    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    by_name = {row[0]: row for row in rows[1:]}
    assert by_name["cp-0"][1:3] == ["Ready", "control-plane"]
    assert by_name["cp-0"][4] == "v1.33.1"
    assert by_name["gpu-1"][1:3] == ["NotReady,SchedulingDisabled", "<none>"]
    assert by_name["gpu-1"][4] == "v1.32.4"

    wide = _stripped(_kubectl(env, "get", "nodes", "-o", "wide"))
    assert wide[0][:7] == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP"
    ]  # fmt: skip
    assert {row[0]: row[5] for row in wide[1:]}["gpu-1"] == "10.0.0.11"


def test_kubectl_get_pods_wide_shows_readiness_restarts_and_node(env: dict[str, str]) -> None:
    rows = _stripped(_kubectl(env, "get", "pods", "-n", "ml", "-o", "wide"))

    assert rows[0] == [
        "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
        "READINESS GATES",
    ]  # fmt: skip
    by_name = {row[0]: row for row in rows[1:]}
    train = by_name["train"]
    assert train[1:4] == ["1/2", "CrashLoopBackOff", "3"]
    assert train[5:] == ["10.244.1.7", "gpu-1", "<none>", "<none>"]
    assert by_name["queued"][1:4] == ["0/1", "Running", "0"]
    assert by_name["queued"][6] == "<none>"

    one = _stripped(_kubectl(env, "get", "pod", "train", "-n", "ml"))
    assert one[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert one[1][:4] == ["train", "1/2", "CrashLoopBackOff", "3"]
