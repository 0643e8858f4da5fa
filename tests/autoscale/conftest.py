"""A cluster whose pools autoscale: the control plane against the whitesky simulator and
the fake Kubernetes API, both over real HTTP; each pass of the autoscaler run here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import kubernetes
import pytest
from django.utils import timezone

from autoscale.reconcile import autoscale_reconcile
from capvco_web.plans import PassRecord
from clusters.models import Cluster, Machine, MachinePool
from kube.client import kube_client
from kube.nodes import provider_id
from kube.tasks import observe_cluster_kube
from tests.clusters.conftest import site
from tests.gpus.conftest import BE, NL, Plane, plane
from tests.kube_sim import KubeSimulator, node_object, pod_object

__all__ = ["BE", "NL", "plane", "site"]
A100 = "nvidia-a100"


@dataclass
class Autoscaled:
    plane: Plane
    kube: KubeSimulator
    cluster: Cluster
    api: Any  # the official client's CoreV1Api on the cluster

    def pool(self, name: str, location: str = NL, **fields: Any) -> MachinePool:
        fields = {
            "gpu_type": "NVIDIA A100", "gpu_count": 1, "replicas": 0,
            "autoscale_enabled": True, "autoscale_min": 0, "autoscale_max": 3, **fields,
        }  # fmt: skip
        return self.plane.pool(self.cluster, name, location, **fields)

    def observe(self) -> None:
        """One Kubernetes observation (a complete listing, unless a fault says otherwise)."""
        observe_cluster_kube(self.cluster.pk)

    def autoscale(self, now: datetime | None = None) -> PassRecord:
        record = autoscale_reconcile(
            cluster=Cluster.objects.get(pk=self.cluster.pk), kube_client=kube_client, now=now
        )
        assert record is not None
        return record

    def converge(self) -> None:
        self.plane.converge(self.cluster)

    def node_of(self, machine: Machine, *, gpus: int = 1, location: str = NL) -> str:
        """The machine's node joins: Ready, its GPUs advertised, labelled as the control
        plane labels GPU nodes."""
        machine.refresh_from_db()
        assert machine.vm_id is not None
        obj = node_object(
            machine.name, provider_id=provider_id(location, machine.vm_id), gpus=gpus,
            labels={"capvco.io/gpu-type": A100},
        )  # fmt: skip
        self.kube.put("demo", obj)
        return machine.name

    def pod(self, name: str, **fields: Any) -> dict[str, Any]:
        labels = fields.pop("labels", {})
        obj = pod_object(name, **fields)
        obj["metadata"]["labels"] = {"app": name, **labels}
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        if not fields.get("node"):
            obj["status"] = {"phase": "Pending"}
        self.kube.put("demo", obj)
        return obj

    def cordoned(self, name: str) -> bool:
        """Whether the node is cordoned, as the official client reads it."""
        return bool(self.api.read_node(name).spec.unschedulable)

    def pods(self) -> set[str]:
        return {p.metadata.name for p in self.api.list_namespaced_pod("default").items}


@pytest.fixture
def scaled(plane: Plane, kube_sim: KubeSimulator) -> Autoscaled:
    cluster = plane.cluster("demo", sites=(NL, BE))
    found = kube_sim.cluster("demo")
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=found.kubeconfig_yaml)
    kube_sim.put("demo", node_object("cpu-0"))  # the cluster's nodes without GPUs
    plane.observe()  # complete listings of both locations: GPU decisions may be taken
    api = kubernetes.client.CoreV1Api(  # type: ignore[attr-defined]
        kubernetes.config.new_client_from_config_dict(found.kubeconfig)
    )
    return Autoscaled(plane, kube_sim, Cluster.objects.get(pk=cluster.pk), api)


def kinds(record: PassRecord) -> list[str]:
    return [step.kind for step in record.steps]


def later(minutes: float) -> datetime:
    return timezone.now() + timezone.timedelta(minutes=minutes)
