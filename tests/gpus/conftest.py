"""A control plane wired to the whitesky simulator over real HTTP, and ways to drive it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from cloud.models import Account, Location
from cloud.observe import account_locations_observe
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, ClusterSite, MachinePool
from clusters.reconcile import ReconcileResult, cluster_reconcile
from clusters.tasks import observe_location
from tests.whitesky_sim import WhiteskySimulator

NL, BE = "nl-rmd-dc01-001", "be-mac-dc01-001"
CLOUDSPACES = {NL: "cs-demo-nl", BE: "cs-demo-be"}
IMAGES = {NL: 11, BE: 21}
BILLING_WINDOW = 60  # seconds of the simulated clock that `unassigned_billed` reads


@dataclass
class Plane:
    """The control plane under test, and the simulated whitesky it talks to."""

    sim: WhiteskySimulator
    account: Account

    def location(self, name: str) -> Location:
        return Location.objects.get(account=self.account, name=name)

    def cluster(
        self, name: str = "demo", sites: tuple[str, ...] = (NL, BE), *, legacy: bool = False
    ) -> Cluster:
        """`legacy`: a row as made before the naming rules, which save() enforces now."""
        if legacy:
            (cluster,) = Cluster.objects.bulk_create([Cluster(name=name, account=self.account)])
        else:
            cluster = Cluster.objects.create(name=name, account=self.account)
        for location in sites:
            ClusterSite.objects.create(
                cluster=cluster,
                location=self.location(location),
                cloudspace_id=CLOUDSPACES[location],
                image_id=IMAGES[location],
            )
        return cluster

    def pool(self, cluster: Cluster, name: str, location: str = NL, **fields: Any) -> MachinePool:
        site = cluster.sites.get(location__name=location)
        fields.setdefault("replicas", 1)
        return MachinePool.objects.create(cluster=cluster, site=site, name=name, **fields)

    def observe(self) -> None:
        """One observe pass over every location, as the beat-driven tasks run it."""
        for location in self.account.locations.all():
            observe_location(location.pk)

    def reconcile(self, cluster: Cluster) -> ReconcileResult:
        with whitesky_client(self.account) as client:
            return cluster_reconcile(client=client, cluster=Cluster.objects.get(pk=cluster.pk))

    def converge(self, cluster: Cluster, passes: int = 8) -> list[ReconcileResult]:
        """Observe and reconcile until the plan is empty (or the cluster is gone)."""
        results = []
        for _ in range(passes):
            self.observe()
            if not Cluster.objects.filter(pk=cluster.pk).exists():
                break
            result = self.reconcile(cluster)
            results.append(result)
            if result.cluster_deleted or (not result.plan):
                break
        return results

    def sim_vgpus(self, prefix: str = "capvco-") -> list[dict[str, Any]]:
        """Every reservation the simulator still holds (and bills) named with `prefix`."""
        return [
            v
            for v in self.sim.state()["vgpus"]
            if v["status"] != "DESTROYED" and v["vgpu_name"].startswith(prefix)
        ]

    def sim_vms(self, prefix: str = "capvco-") -> list[dict[str, Any]]:
        """Every VM the simulator still has (recycle bin included) named with `prefix`."""
        return [
            vm
            for vm in self.sim.state()["vms"]
            if vm["status"] != "DESTROYED" and vm["name"].startswith(prefix)
        ]

    def unassigned_billed(self) -> dict[str, float]:
        """vGPUs the simulator bills without a VM from now on, over all locations.

        The simulator bills a stretch still open up to its own now, never beyond: the
        window is read once its clock has been moved past it."""
        start = math.floor(self.sim.advance(0)) + 1  # the next whole second: after releases
        self.sim.advance(BILLING_WINDOW + 1)
        found: dict[str, float] = {}
        with whitesky_client(self.account) as client:
            for location in (NL, BE):
                usage = client.location_consumption(
                    location=location, start=start, end=start + BILLING_WINDOW
                )
                found.update({k: v for k, v in usage.unassigned_vgpus.items() if v > 0})
        return found


@pytest.fixture
def plane(whitesky_sim: WhiteskySimulator, db: None) -> Plane:
    account = Account.objects.create(
        name="demo",
        api_url=whitesky_sim.api_url,
        iam_url=whitesky_sim.iam_url,
        customer_id=whitesky_sim.customer_id,
        credential=whitesky_sim.token(),
    )
    with whitesky_client(account) as client:
        account_locations_observe(client=client, account=account)
    return Plane(sim=whitesky_sim, account=account)
