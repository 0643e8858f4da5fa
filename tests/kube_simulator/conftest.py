"""The official client, pointed at one simulated cluster."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes
import pytest

from tests.kube_sim import KubeSimulator, SimCluster


@pytest.fixture
def cluster(kube_sim: KubeSimulator) -> SimCluster:
    return kube_sim.cluster("prod")


@pytest.fixture
def api_client(cluster: SimCluster) -> Iterator[kubernetes.client.ApiClient]:
    client = kubernetes.config.new_client_from_config_dict(cluster.kubeconfig)
    yield client
    client.close()


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def scheduling_process() -> Iterator[KubeSimulator]:
    """A simulator whose scheduler and kubelets run, ten times faster than real time."""
    with KubeSimulator(extra_args=("--schedule", "--time-scale", "10")) as simulator:
        yield simulator


@pytest.fixture
def scheduling(scheduling_process: KubeSimulator) -> KubeSimulator:
    scheduling_process.reset()
    return scheduling_process
