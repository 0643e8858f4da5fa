"""A small world for the dashboard: one account, two locations (one of them last observed
long ago), cards of two GPU types, a cluster with a GPU pool of two running machines, an
orphan named by us, a reservation not named by us, released history and a failed machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from clusters.models import Cluster, Location, Machine, MachinePool
from gpus.models import GpuProfile, VgpuReservation
from tests.factories import (
    AccountFactory,
    ClusterFactory,
    ClusterSiteFactory,
    GpuProfileFactory,
    LocationFactory,
    MachineFactory,
    MachinePoolFactory,
    MembershipFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
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
