"""A small world for the dashboard: one account, two locations (one of them last observed
long ago), cards of two GPU types, a cluster with a GPU pool of two running machines, an
orphan named by us, a reservation not named by us, released history and a failed machine.
`kube` adds its Kubernetes: nodes, pods and each flag the mirror raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from cloud.models import Location
from clusters.models import Cluster, Machine, MachinePool
from gpus.models import GpuProfile, VgpuReservation
from kube.models import KubeNode, KubePod
from tests.factories import (
    AccountFactory,
    ClusterFactory,
    ClusterSiteFactory,
    GpuProfileFactory,
    KubeNodeFactory,
    KubePodFactory,
    LocationFactory,
    MachineFactory,
    MachineNodeFactory,
    MachinePoolFactory,
    MembershipFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
    gpu_addon_held,
    kube_observed_as,
)
from tests.gpus.conftest import plane  # noqa: F401 (the control plane on the simulator)

State = VgpuReservation.State


@dataclass
class World:
    fresh: Location
    stale: Location
    a100: GpuProfile
    t4: GpuProfile
    cluster: Cluster
    pool: MachinePool
    machines: list[Machine]
    attached: list[VgpuReservation]
    orphan: VgpuReservation
    leak: VgpuReservation
    released: VgpuReservation
    failed: Machine


@pytest.fixture
def world(db: None) -> World:
    now = timezone.now()
    account = AccountFactory(name="acme")
    fresh = LocationFactory(
        account=account,
        name="nl-fresh-dc01",
        vgu_price=Decimal("730.0000"),  # 1.00 EUR per vGPU and hour
        last_complete_observation_at=now - timedelta(seconds=20),
        observation_started_at=now - timedelta(seconds=20),
    )
    stale = LocationFactory(
        account=account,
        name="be-stale-dc02",
        last_complete_observation_at=now - timedelta(hours=2),
        observation_complete=False,
        observation_error="GPU listing failed: 503",
    )
    a100 = GpuProfileFactory(
        location=fresh, profile_id="card-a100", model="A100 (0000:3b:00.0)", available_instances=5
    )
    t4 = GpuProfileFactory(location=stale, profile_id="card-t4", model="T4", available_instances=2)
    cluster = ClusterFactory(account=account, name="prod")
    site = ClusterSiteFactory(cluster=cluster, location=fresh, cloudspace_id="cs-prod")
    pool = MachinePoolFactory(
        site=site, name="gpu", replicas=2, gpu_type="NVIDIA A100", gpu_count=1
    )
    machines = [
        MachineFactory(pool=pool, index=i, phase=Machine.Phase.RUNNING, vm_id=7000 + i)
        for i in range(2)
    ]
    for m in machines:
        VirtualMachineFactory(
            location=fresh, cloudspace_id="cs-prod", vm_id=m.vm_id, name=m.vm_name
        )
    attached = [
        VgpuReservationFactory(machine=m, location=fresh, gpu_id="card-a100") for m in machines
    ]
    orphan = VgpuReservationFactory(
        orphaned=True,
        location=fresh,
        name="capvco-prod-gpu-9-gpu-0",
        owner_cluster="prod",
        owner_machine="gpu-9",
        gpu_id="card-a100",
        unassigned_since=now - timedelta(hours=3),
        orphaned_since=now - timedelta(hours=2),
        orphan_confirmations=3,
    )
    leak = VgpuReservationFactory(
        orphaned=True,
        location=fresh,
        name="someone-elses-vgpu",
        gpu_id="card-a100",
        unassigned_since=now - timedelta(hours=1),
        orphaned_since=now - timedelta(hours=1),
    )
    released = VgpuReservationFactory(
        machine=None,
        location=fresh,
        name="capvco-prod-gpu-5-gpu-0",
        state=State.RELEASED,
        released_at=now - timedelta(days=3),
    )
    other_pool = MachinePoolFactory(site=site, name="cpu", replicas=1)
    failed = MachineFactory(
        pool=other_pool, index=0, phase=Machine.Phase.FAILED, failure_message="image 42 is gone"
    )
    return World(
        fresh, stale, a100, t4, cluster, pool, machines, attached, orphan, leak, released, failed
    )


@dataclass
class Kube:
    """The world's cluster as Kubernetes shows it: gpu-0's node advertises its A100 and a
    pod holds it; gpu-1's node advertises none (flagged); a node no machine owns, not Ready
    (flagged);
    a control-plane node; and a machine of another pool whose node never joined (flagged)."""

    advertising: KubeNode
    silent: KubeNode
    unowned: KubeNode
    control_plane: KubeNode
    pod: KubePod
    never_joined: Machine


A100_LABELS = {"capvco.io/gpu-type": "nvidia-a100", "capvco.io/gpu-count": "1"}


@pytest.fixture
def kube(world: World) -> Kube:
    now = timezone.now()
    Cluster.objects.filter(pk=world.cluster.pk).update(
        kubeconfig="apiVersion: v1\nkind: Config\n", gpu_addon=True
    )
    listed_at = now - timedelta(seconds=15)
    kube_observed_as(world.cluster, complete=True, started_at=listed_at, last_complete_at=listed_at)
    gpu_addon_held(world.cluster, hash="0" * 64, applied_at=now - timedelta(hours=1))
    gpu_0, gpu_1 = world.machines
    advertising = KubeNodeFactory(
        cluster=world.cluster, name=gpu_0.vm_name, machine=gpu_0, labels=A100_LABELS
    )
    silent = KubeNodeFactory(
        cluster=world.cluster,
        name=gpu_1.vm_name,
        machine=gpu_1,
        labels=A100_LABELS,
        gpu_capacity=0,
        gpu_allocatable=0,
        gpus_missing=True,
        gpus_missing_reason="No nvidia.com/gpu advertised 10 minutes after it joined",
    )
    unowned = KubeNodeFactory(
        cluster=world.cluster,
        name="stray-node",
        ready=False,
        gpu_capacity=0,
        gpu_allocatable=0,
        unowned_since=now - timedelta(hours=1),
    )
    control_plane = KubeNodeFactory(
        cluster=world.cluster,
        name="cp-0",
        gpu_capacity=0,
        gpu_allocatable=0,
        labels={"node-role.kubernetes.io/control-plane": ""},
    )
    pod = KubePodFactory(
        cluster=world.cluster, namespace="ml", name="train-0", node_name=advertising.name
    )
    KubePodFactory(cluster=world.cluster, name="web-0", node_name=advertising.name, gpu_requests=0)
    KubePodFactory(  # finished: holds nothing
        cluster=world.cluster,
        name="done-0",
        node_name=advertising.name,
        phase=KubePod.Phase.SUCCEEDED,
    )
    edge = MachinePoolFactory(site=world.pool.site, name="edge", replicas=1)
    never_joined = MachineFactory(
        pool=edge,
        index=0,
        phase=Machine.Phase.RUNNING,
        vm_id=7100,
    )
    MachineNodeFactory(
        machine=never_joined,
        missing_reason="Never joined: no node named capvco-prod-edge-0, 15 minutes after "
        "its VM started.",
    )
    world.cluster.refresh_from_db()
    return Kube(advertising, silent, unowned, control_plane, pod, never_joined)


@pytest.fixture
def member(client: Client, world: World) -> Callable[[str], Client]:
    """`member("viewer")`: the client, logged in as a user of that role in the world's
    account (and of none other)."""

    def log_in(role: str) -> Client:
        client.force_login(MembershipFactory(account=world.cluster.account, role=role).user)
        return client

    return log_in


@pytest.fixture
def stranger(client: Client, world: World) -> Client:
    """The client, logged in as an admin of another account: the world is not theirs."""
    client.force_login(MembershipFactory(role="admin").user)
    return client
