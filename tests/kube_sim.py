"""The fake Kubernetes API for tests (pytest plugin) and for scripts (``KubeSimulator``).

``tests/conftest.py`` loads this module with ``pytest_plugins``. The ``kube_sim`` fixture
gives one simulator process per test session, reset before each test (no cluster, no
fault, an empty call log). Scripts (benchmarks, the demo) use the class directly::

    with KubeSimulator() as sim:
        cluster = sim.cluster("prod")
        api = kubernetes.client.CoreV1Api(
            kubernetes.config.new_client_from_config_dict(cluster.kubeconfig)
        )

The control API it drives is described in docs/simulator-contract.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import requests

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONTROL_TIMEOUT = 60  # seconds; seeding thousands of pods takes a while
GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class SimCluster:
    name: str
    server: str
    token: str
    kubeconfig: dict[str, Any]
    ca_file: str  # the simulator's CA: `verify=` of a plain HTTP client

    def kubeconfig_file(self, directory: Path) -> Path:
        """The kubeconfig as kubectl reads it (`--kubeconfig`)."""
        path = directory / f"{self.name}.kubeconfig"
        path.write_text(self.kubeconfig_yaml)
        return path

    @property
    def kubeconfig_yaml(self) -> str:
        import yaml

        return str(yaml.safe_dump(self.kubeconfig))

    def call(self, method: str, path: str) -> requests.Response:
        """`method` `path` on the cluster's API server as its admin, with a plain HTTP
        client (not ours): the answer as it came."""
        return requests.request(
            method,
            f"{self.server}{path}",
            headers={"Authorization": f"Bearer {self.token}"},
            verify=self.ca_file,
            timeout=10,
        )

    def allowed_servers(self) -> Any:
        """An allow-list of this simulator's origin alone, for a KubeClient made by hand."""
        from urllib.parse import urlsplit

        from capvco_web.integrations.kube.servers import AllowedServers

        parts = urlsplit(self.server)
        return AllowedServers([f"{parts.scheme}://{parts.netloc}"])


class KubeSimulator:
    """A simulator subprocess on a free port, and a client for its control API."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = None,
        extra_args: tuple[str, ...] = (),
    ):
        self._tls_dir = tempfile.TemporaryDirectory(prefix="kube-sim-tls-")
        self.ca_file = str(Path(self._tls_dir.name) / "ca.crt")
        self._args = [sys.executable, "-m", "simulator.kube", "--host", host, "--port", str(port)]
        self._args += ["--tls-dir", self._tls_dir.name]
        if seed is not None:
            self._args += ["--seed", str(seed)]
        self._args += list(extra_args)
        self._process: subprocess.Popen[str] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives with the object
        self._session = requests.Session()
        self.base_url = ""

    # ---- process -------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> KubeSimulator:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._process = subprocess.Popen(
            self._args, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True,
        )  # fmt: skip
        line = self._process.stdout.readline() if self._process.stdout else ""
        if "listening on " not in line:
            self.stop()
            raise RuntimeError(f"kube simulator did not start: {line!r} {self.stderr()}")
        self.base_url = line.rsplit("listening on ", 1)[1].strip()
        kube_server_allow(self.base_url)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._control("GET", "clusters")
                return self
            except requests.ConnectionError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise RuntimeError("kube simulator does not answer") from None
                time.sleep(0.05)

    def stop(self) -> None:
        process, self._process = self._process, None
        self._session.close()
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        self._tls_dir.cleanup()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def __enter__(self) -> KubeSimulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- control API -------------------------------------------------------------------

    def _control(self, method: str, name: str, body: Any = None) -> Any:
        response = self._session.request(
            method,
            f"{self.base_url}/_sim/{name}",
            json=body,
            timeout=CONTROL_TIMEOUT,
            verify=self.ca_file,  # per call: REQUESTS_CA_BUNDLE would override a session's
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"kube simulator control {method} /_sim/{name}: "
                f"{response.status_code} {response.text}"
            )
        return response.json()

    def reset(self) -> None:
        """No cluster, no fault, an empty call log, default configuration."""
        self._control("POST", "reset")

    def cluster(self, name: str, *, token: str | None = None) -> SimCluster:
        """Add a cluster (namespaces default, kube-system, ... exist) and answer its access."""
        body: dict[str, Any] = {"name": name}
        if token is not None:
            body["token"] = token
        found = self._control("POST", "clusters", body)
        return SimCluster(
            found["name"], found["server"], found["token"], found["kubeconfig"], self.ca_file
        )

    def remove_cluster(self, name: str) -> None:
        self._control("DELETE", f"clusters/{name}")

    def put(self, cluster: str, *objects: dict[str, Any]) -> str:
        """Store objects as given (status included, namespaces made as needed), as a
        kubelet registering its node or a controller would; answers the resourceVersion."""
        found = self._control("POST", f"clusters/{cluster}/objects", {"objects": list(objects)})
        return str(found["resourceVersion"])

    def compact(self, cluster: str) -> None:
        """Expire the continue tokens of older resourceVersions (etcd compaction): 410."""
        self._control("POST", f"clusters/{cluster}/compact")

    def register(self, cluster: str, **spec: Any) -> None:
        """Serve a custom kind: ``register(c, group=, version=, plural=, kind=, namespaced=)``."""
        self._control("POST", f"clusters/{cluster}/resources", spec)

    def dcgm(self, cluster: str, nodes: dict[str, list[dict[str, Any]]]) -> None:
        """What the dcgm-exporter of each node serves (simulator/kube/dcgm.py): per GPU,
        its labels and a series of samples, one a scrape."""
        self._control("POST", f"clusters/{cluster}/dcgm", {"nodes": nodes})

    def state(self, cluster: str) -> dict[str, Any]:
        return dict(self._control("GET", f"clusters/{cluster}/state"))

    def fault(self, **spec: Any) -> int:
        """Add a fault, e.g. ``fault(operation="list pods", status=503, skip=1)``."""
        return int(self._control("POST", "faults", spec)["id"])

    def clear_faults(self) -> None:
        self._control("DELETE", "faults")

    def faults(self) -> list[dict[str, Any]]:
        return list(self._control("GET", "faults")["faults"])

    def calls(self, cluster: str | None = None) -> list[dict[str, Any]]:
        found = list(self._control("GET", "calls")["calls"])
        return [call for call in found if cluster is None or call["cluster"] == cluster]

    def clear_calls(self) -> None:
        self._control("DELETE", "calls")

    def configure(
        self,
        *,
        continue_ttl_seconds: float | None = None,
        bookmark_interval_seconds: float | None = None,
        watch_history: int | None = None,
    ) -> None:
        """Change what `reset` sets back: continue-token lifetime, seconds between two
        bookmarks of a watch (60), events a watch can start behind (1000)."""
        given = {
            "continue_ttl_seconds": continue_ttl_seconds,
            "bookmark_interval_seconds": bookmark_interval_seconds,
            "watch_history": watch_history,
        }
        self._control("POST", "config", {k: v for k, v in given.items() if v is not None})


def kube_server_allow(origin: str) -> None:
    """Let the control plane of this process, and of the processes it starts from now on,
    send a kubeconfig's credential to `origin` (an http(s)://127.0.0.1:port)."""
    listed = [e for e in os.environ.get("KUBE_ALLOWED_HOSTS", "").split(",") if e.strip()]
    if origin not in listed:
        os.environ["KUBE_ALLOWED_HOSTS"] = ",".join([*listed, origin])
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        from django.conf import settings

        if origin not in settings.KUBE_ALLOWED_HOSTS:
            settings.KUBE_ALLOWED_HOSTS = [*settings.KUBE_ALLOWED_HOSTS, origin]


# ---- objects as a kubelet and the scheduler would make them -----------------------------


def node_object(
    name: str,
    *,
    provider_id: str = "",
    gpus: int = 0,
    allocatable_gpus: int | None = None,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    kubelet_version: str = "v1.33.1",
) -> dict[str, Any]:
    capacity: dict[str, str] = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    allocatable = dict(capacity)
    if gpus:
        capacity[GPU] = str(gpus)
        allocatable[GPU] = str(gpus if allocatable_gpus is None else allocatable_gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {"providerID": provider_id} if provider_id else {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}
            ],
            # Every field: the official client's models refuse a node info without one.
            "nodeInfo": {
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": "",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04 LTS",
                "kernelVersion": "6.8.0",
                "containerRuntimeVersion": "containerd://1.7.24",
                "bootID": name,
                "machineID": name,
                "systemUUID": name,
            },
        },
    }


def pod_object(
    name: str,
    *,
    namespace: str = "default",
    node: str = "",
    phase: str = "Running",
    gpus: int = 0,
    sriov_network: str = "",
    gpu_type: str = "",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources = {"limits": {GPU: str(gpus)}} if gpus else {}
    annotations = {"capvco.io/sriov-network": sriov_network} if sriov_network else {}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": annotations}
    if labels:
        metadata["labels"] = labels
    container = {"name": "main", "image": "busybox", "resources": resources}
    spec: dict[str, Any] = {"containers": [container]}
    if node:
        spec["nodeName"] = node
    if gpu_type:
        spec["nodeSelector"] = {"capvco.io/gpu-type": gpu_type}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase},
    }


# NVIDIA's dcgm-exporter as the GPU Operator installs it: a DaemonSet's pods and their
# Service, labelled app=nvidia-dcgm-exporter, serving on 9400.
DCGM_NAMESPACE = "gpu-operator"
DCGM_LABELS = {"app": "nvidia-dcgm-exporter"}
H200_RECORDING = PROJECT_ROOT.parent / "shared" / "gpu-node"
H200_MEMORY_MIB = 143771  # memory.total of the recorded H200 (query-gpu.csv)


def dcgm_exporter_objects(*nodes: str) -> list[dict[str, Any]]:
    """The exporter's namespace, Service, and one pod on each node."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DCGM_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "nvidia-dcgm-exporter",
                "namespace": DCGM_NAMESPACE,
                "labels": dict(DCGM_LABELS),
            },
            "spec": {
                "selector": dict(DCGM_LABELS),
                "ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400}],
            },
        },
    ]
    for node in nodes:
        pod = pod_object(f"nvidia-dcgm-exporter-{node}", namespace=DCGM_NAMESPACE, node=node)
        pod["metadata"]["labels"] = dict(DCGM_LABELS)
        objects.append(pod)
    return objects


def recorded_utilisation() -> list[dict[str, float]]:
    """The H200 node's recording, idle then busy (utilisation-idle-then-busy.csv), as the
    exporter's samples: one a line."""
    import csv

    path = H200_RECORDING / "utilisation-idle-then-busy.csv"
    with path.open() as handle:
        rows = list(csv.reader(handle, skipinitialspace=True))[1:]
    return [
        {
            "util": float(util.split()[0]),
            "fb_used": float(used.split()[0]),
            "fb_free": float(H200_MEMORY_MIB - int(used.split()[0])),
            "power": float(power.split()[0]),
        }
        for _, util, _, used, power in rows
    ]


@pytest.fixture(scope="session")
def kube_sim_process() -> Iterator[KubeSimulator]:
    """The session's simulator process; tests use ``kube_sim``, which resets it."""
    simulator = KubeSimulator().start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture
def kube_sim(kube_sim_process: KubeSimulator) -> KubeSimulator:
    """The fake Kubernetes API with no cluster, no fault and an empty call log."""
    kube_sim_process.reset()
    return kube_sim_process
