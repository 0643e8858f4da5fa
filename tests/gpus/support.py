"""Making orphans the way they happen: a machine provisioned, then deleted with force."""

from __future__ import annotations

from datetime import datetime, timedelta

from capvco_web.audit import SystemActor
from cloud.models import Account, Location
from cloud.whitesky import whitesky_client
from clusters.models import Machine
from clusters.releases import SweepResult, orphan_sweep
from clusters.services import machine_force_delete
from gpus.models import VgpuReservation
from tests.gpus.conftest import NL, Plane


def orphan_made(plane: Plane, *, pool: str = "a100", location: str = NL) -> VgpuReservation:
    """One GPU machine provisioned, force-deleted, then one complete observation: its
    reservation (and its VM) stay behind, flagged orphaned. Answers the reservation."""
    cluster = plane.cluster()
    plane.pool(cluster, pool, location=location, gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    machine = Machine.objects.get(name=f"{pool}-0")
    machine_force_delete(
        machine=machine, actor=SystemActor.RECONCILER, reason="stuck in provisioning"
    )
    plane.observe()
    return VgpuReservation.objects.get(name=f"capvco-demo-{pool}-0-gpu-0")


def auto_release_set(
    account: Account, *, on: bool = True, confirmations: int = 2, grace_seconds: int = 0
) -> None:
    account.orphan_auto_release = on
    account.orphan_confirmations = confirmations
    account.orphan_grace_period = timedelta(seconds=grace_seconds)
    account.save()


def sweep(plane: Plane, location: str = NL, now: datetime | None = None) -> SweepResult:
    """One pass of the orphan sweep over a location, as the beat's task runs it."""
    with whitesky_client(plane.account) as client:
        return orphan_sweep(client=client, location=Location.objects.get(name=location), now=now)
