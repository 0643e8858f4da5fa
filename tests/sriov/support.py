"""A control plane with SR-IOV on, against the whitesky simulator and the fake Kubernetes
API over real HTTP: cluster `demo` in nl-rmd-dc01-001, one machine per seeded VM, each
with its node (providerID), SR-IOV enabled on network `sriov-nl-rmd` with a credential
of its own (subject `sriov-operator` in the simulator's call log), its enrollment token,
and node-0's node token (`agent_token`; `node_token(i)` enrolls node i)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User

from capvco_web.audit import SystemActor
from cloud.models import Account, Location
from cloud.observe import account_locations_observe
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from sriov.agent import (
    Clients,
    NotEnabled,
    Refused,
    WhiteskyFailed,
    WhiteskyRefused,
    pod_nic_add,
    pod_nic_delete,
    vm_queue_run,
)
from sriov.models import AgentToken, PodNic
from sriov.services import sriov_config_set
from sriov.tokens import agent_token_rotate, node_token_enroll
from tests.kube_sim import KubeSimulator, SimCluster, node_object, pod_object
from tests.whitesky_sim import WhiteskySimulator

NL = "nl-rmd-dc01-001"
CLOUDSPACE = "cs-demo-nl"
NETWORK = "sriov-nl-rmd"
NETWORK_ID = 101
SRIOV_SUBJECT = "sriov-operator"
ACCOUNT_SUBJECT = "demo-user"  # the seeded user: the account's own credential
KEY = "?container_id=c0ffee&ifname=net1"  # the attachment add_body names


@dataclass
class World:
    sim: WhiteskySimulator
    kube: KubeSimulator
    account: Account
    cluster: Cluster
    location: Location
    machines: list[Machine]
    enrollment_token: str
    kube_cluster: SimCluster
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_tokens: dict[int, str] = field(default_factory=dict)

    def node_token(self, index: int) -> str:
        """Node `index`'s token, enrolled (as its installer would) the first time."""
        if index not in self.node_tokens:
            enrollment = AgentToken.objects.select_related("cluster").get(
                cluster=self.cluster, node_name="", expires_at__isnull=True
            )
            _, raw = node_token_enroll(enrollment=enrollment, node_name=self.node(index))
            self.node_tokens[index] = raw
        return self.node_tokens[index]

    @property
    def agent_token(self) -> str:
        """Node-0's token: what the CNI plugin on node-0 calls with."""
        return self.node_token(0)

    def node(self, index: int) -> str:
        return f"node-{index}"

    def vm(self, index: int) -> int:
        vm_id = self.machines[index].vm_id
        assert vm_id is not None
        return vm_id

    def pod(
        self, name: str, *, node: int = 0, phase: str = "Running", **more: Any
    ) -> dict[str, Any]:
        """A pod the scheduler placed on node `node` (in the fake API server); its uid."""
        obj = pod_object(name, node=self.node(node), phase=phase, sriov_network=NETWORK, **more)
        self.kube.put("demo", obj)
        got = self.kube_pod(name)
        self.pods[name] = got
        return got

    def kube_pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        found = self.kube_cluster.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        found.raise_for_status()
        return dict(found.json())

    @property
    def kube_server(self) -> str:
        return self.kube_cluster.server

    @property
    def kube_token(self) -> str:
        return self.kube_cluster.token

    def request(
        self, name: str, *, node: int = 0, container_id: str = "", ifname: str = "net1",
        **options: Any,
    ) -> PodNic:  # fmt: skip
        """ADD for pod `name` (its sandbox `sandbox-<name>` unless told), through the
        service the agent API calls: the request, recorded (queued, or attached)."""
        pod = self.pods[name]
        return pod_nic_add(
            cluster=Cluster.objects.get(pk=self.cluster.pk),
            pod_uid=pod["metadata"]["uid"],
            namespace=pod["metadata"]["namespace"],
            pod_name=name,
            node_name=self.node(node),
            container_id=container_id or f"sandbox-{name}",
            ifname=ifname,
            **options,
        )

    def add(self, name: str, **options: Any) -> PodNic:
        """ADD, then its VM's queue run as the worker runs it: the NIC attached, or the
        failure recorded on the request raised as the agent API says it."""
        row = self.request(name, **options)
        if row.state != PodNic.State.ATTACHED:
            vm_queue_run(location_id=row.location_id, vm_id=row.vm_id)
            row.refresh_from_db()
        if row.state == PodNic.State.FAILED:
            failure: type[Refused] = {
                WhiteskyRefused.code: WhiteskyRefused,
                NotEnabled.code: NotEnabled,
            }.get(row.failure_code, WhiteskyFailed)
            raise failure(row.failure)
        if row.state == PodNic.State.ATTACHING:
            raise WhiteskyFailed(row.failure or "the attach's outcome is not known yet")
        return row

    def delete(
        self, name: str, *, node: int = 0, container_id: str = "", ifname: str = "net1"
    ) -> PodNic | None:
        """DEL for pod `name` (its sandbox `sandbox-<name>` unless told), then its VM's queue
        run as the worker runs it: the row (None when that sandbox held none), or the
        failure of its detach raised as the plugin's poll reads it."""
        row = pod_nic_delete(
            cluster=Cluster.objects.get(pk=self.cluster.pk),
            node_name=self.node(node),
            pod_uid=self.uid(name),
            container_id=container_id or f"sandbox-{name}",
            ifname=ifname,
        )
        if row is None or row.state == PodNic.State.RELEASED:
            return row
        vm_queue_run(location_id=row.location_id, vm_id=row.vm_id)
        row.refresh_from_db()
        if row.state != PodNic.State.RELEASED and row.detach_queued_at is None:
            failure: type[Refused] = {
                WhiteskyRefused.code: WhiteskyRefused,
                NotEnabled.code: NotEnabled,
            }.get(row.failure_code, WhiteskyFailed)
            raise failure(row.failure)
        return row

    def uid(self, name: str) -> str:
        return str(self.pods[name]["metadata"]["uid"])

    def sim_nics(self, vm_id: int) -> list[dict[str, Any]]:
        nics = self.sim.state()["nics"]
        rows = nics.values() if isinstance(nics, dict) else nics
        return [n for n in rows if n.get("vm_id") == vm_id]

    def nic_calls(self) -> list[dict[str, Any]]:
        nic_ops = {
            "listExternalNetworksVirtualMachine",
            "attachExternalNetworksVirtualMachine",
            "detachExternalNetworksVirtualMachine",
        }
        return [c for c in self.sim.calls()["calls"] if c["operation"] in nic_ops]


def world_build(
    sim: WhiteskySimulator, kube: KubeSimulator, *, vms: int = 2, admin: User | None = None
) -> World:
    account = Account.objects.create(
        name="demo",
        api_url=sim.api_url,
        iam_url=sim.iam_url,
        customer_id=sim.customer_id,
        credential=sim.token(),
    )
    with whitesky_client(account) as client:
        account_locations_observe(client=client, account=account)
    location = Location.objects.get(account=account, name=NL)
    cluster = Cluster.objects.create(name="demo", account=account)
    site = ClusterSite.objects.create(
        cluster=cluster, location=location, cloudspace_id=CLOUDSPACE, image_id=11
    )
    pool = MachinePool.objects.create(cluster=cluster, site=site, name="work", replicas=vms)
    vm_ids = sim.seed(CLOUDSPACE, vms=vms, prefix="capvco-demo-work")["vm_ids"]
    machines = [
        Machine.objects.create(
            pool=pool, name=f"work-{i}", index=i, vm_id=vm_id, phase=Machine.Phase.RUNNING
        )
        for i, vm_id in enumerate(vm_ids)
    ]
    kube_cluster = kube.cluster("demo")
    kube.put(
        "demo",
        *[
            node_object(f"node-{i}", provider_id=f"vco://{NL}/{vm_id}")
            for i, vm_id in enumerate(vm_ids)
        ],
    )
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=kube_cluster.kubeconfig_yaml)
    cluster.refresh_from_db()
    actor: Any = admin or SystemActor.RECONCILER
    sriov_config_set(
        cluster=cluster,
        changes={
            "enabled": True,
            "external_network": NETWORK,
            "credential": sim.token(subject=SRIOV_SUBJECT),
        },
        actor=actor,
    )
    _, raw = agent_token_rotate(cluster=cluster, actor=actor)
    return World(
        sim=sim,
        kube=kube,
        account=account,
        cluster=cluster,
        location=location,
        machines=machines,
        enrollment_token=raw,
        kube_cluster=kube_cluster,
    )


@contextmanager
def queue_worker() -> Iterator[None]:
    """A Celery worker in this process (solo pool, in a thread of its own) on the tests'
    broker: what runs the VMs' NIC queues for the ADDs of a live server."""
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_postrun
    from django.db import connections

    from capvco_web import celery_app

    def close(**_: Any) -> None:
        connections.close_all()  # the worker thread's, before the test database goes

    task_postrun.connect(close, weak=False)
    try:
        with start_worker(celery_app, pool="solo", perform_ping_check=False):
            yield
    finally:
        task_postrun.disconnect(close)


__all__ = ["Clients", "World", "queue_worker", "world_build"]


AGENT_NICS = "/api/v1/sriov/agent/nics/"


def agent_add(client: Any, body: dict[str, Any]) -> Any:
    """ADD through the agent API as the plugin and a worker make it: the POST, and when it
    answered 202 (queued), the VM's queue run as the worker runs it and the POST again
    (the NIC's answer). Any other answer is the first one."""
    answer = client.post(AGENT_NICS, body, content_type="application/json")
    if answer.status_code != 202:
        return answer
    row = PodNic.objects.exclude(state=PodNic.State.RELEASED).get(
        container_id=body["container_id"], ifname=body["ifname"]
    )
    vm_queue_run(location_id=row.location_id, vm_id=row.vm_id)
    return client.post(AGENT_NICS, body, content_type="application/json")


def agent_delete(client: Any, url: str) -> Any:
    """DEL through the agent API as the plugin and a worker make it: the DELETE, and when
    it answered 202 (its detach queued), the VM's queue run as the worker runs it and the
    DELETE again (204 once released). Any other answer is the first one."""
    answer = client.delete(url)
    if answer.status_code != 202:
        return answer
    nic = answer.json()
    row = PodNic.objects.exclude(state=PodNic.State.RELEASED).get(
        pod_uid=nic["pod_uid"], container_id=nic["container_id"], ifname=nic["ifname"]
    )
    vm_queue_run(location_id=row.location_id, vm_id=row.vm_id)
    return client.delete(url)


def add_body(world: World, name: str, node: int = 0) -> dict[str, Any]:
    """The agent API's ADD body for pod `name` on node `node`: the attachment KEY names."""
    pod = world.pods[name]["metadata"]
    return {
        "pod_uid": pod["uid"],
        "namespace": pod["namespace"],
        "pod_name": name,
        "node_name": world.node(node),
        "container_id": "c0ffee",
        "ifname": "net1",
    }
