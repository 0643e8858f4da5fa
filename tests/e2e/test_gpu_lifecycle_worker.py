"""The GPU lifecycle run by a real Celery worker with beat, against the simulator."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.test import Client

from capvco_web.models import AuditEvent
from cloud.models import Account, Location
from cloud.observe import account_locations_observe
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from gpus.models import VgpuReservation
from tests.e2e.processes import broker_flush, celery_worker
from tests.factories import MembershipFactory
from tests.whitesky_sim import WhiteskySimulator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
FAST = {
    "OBSERVE_INTERVAL_SECONDS": "1",
    "RECONCILE_INTERVAL_SECONDS": "1",
    "ORPHAN_SWEEP_INTERVAL_SECONDS": "1",
}


NL = "nl-rmd-dc01-001"
SITES = {NL: ("cs-demo-nl", 11), "be-mac-dc01-001": ("cs-demo-be", 21)}  # cloudspace, image


def e2e_site(sim: WhiteskySimulator, location: str = NL, **cluster: object) -> ClusterSite:
    """The account `e2e` on the simulator, its locations listed, and the site of its
    cluster `e2e` in `location` (the cluster made with `cluster`'s fields too)."""
    account = Account.objects.create(
        name="e2e", api_url=sim.api_url, iam_url=sim.iam_url,
        customer_id=sim.customer_id, credential=sim.token(),
    )  # fmt: skip
    with whitesky_client(account) as client:
        account_locations_observe(client=client, account=account)
    made = Cluster.objects.create(name="e2e", account=account, **cluster)
    cloudspace, image = SITES[location]
    return ClusterSite.objects.create(
        cluster=made, location=Location.objects.get(name=location), cloudspace_id=cloudspace,
        image_id=image,
    )  # fmt: skip


def wait_for(condition: Callable[[], bool], what: str, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}; worker log:\n{log.read_text()[-4000:]}")


def live_vgpus(sim: WhiteskySimulator, prefix: str) -> list[dict[str, object]]:
    return [
        v for v in sim.state()["vgpus"]
        if v["status"] != "DESTROYED" and str(v["vgpu_name"]).startswith(prefix)
    ]  # fmt: skip


def test_worker_provisions_scales_down_and_releases_on_request(
    tmp_path: Path, whitesky_sim: WhiteskySimulator, require_postgres: None
) -> None:
    site = e2e_site(whitesky_sim)
    cluster, account = site.cluster, site.cluster.account
    with whitesky_client(account) as client:
        stray_id = client.reserve_vgpu(
            location=NL, gpu_id=client.list_gpu_profiles(location=NL)[0].id,
            name="capvco-gone-x-0-gpu-0",
        )  # fmt: skip
    pool = MachinePool.objects.create(
        cluster=cluster, site=site, name="gpu", replicas=2, gpu_type="NVIDIA A100", gpu_count=1
    )
    broker_flush()
    log = tmp_path / "celery.log"

    with celery_worker(tmp_path, **FAST):
        wait_for(
            lambda: (
                len(live_vgpus(whitesky_sim, "capvco-e2e-")) == 2
                and set(Machine.objects.values_list("phase", flat=True)) == {"running"}
            ),
            "two running GPU machines",
            log,
        )

        pool.replicas = 0
        pool.save()
        wait_for(
            lambda: not live_vgpus(whitesky_sim, "capvco-e2e-") and not Machine.objects.exists(),
            "the pool's teardown",
            log,
        )

        # A reservation nobody owns: flagged orphaned, released when a person asks.
        wait_for(
            lambda: VgpuReservation.objects.filter(
                vgpu_id=stray_id, listed__orphaned_since__isnull=False
            ).exists(),
            "the stray reservation flagged orphaned",
            log,
        )
        stray = VgpuReservation.objects.get(vgpu_id=stray_id)
        web = Client()
        web.force_login(
            MembershipFactory(
                user__username="ops", account=stray.location.account, role="operator"
            ).user
        )
        response = web.post(
            f"/api/v1/reservations/{stray.pk}/release/",
            {"reason": "left over from a deleted cluster"},
            content_type="application/json",
        )
        assert response.status_code == 202
        wait_for(lambda: not live_vgpus(whitesky_sim, "capvco-gone-"), "the release", log)

    event = AuditEvent.objects.get(action="vgpu.release", object_id=str(stray.pk))
    assert (event.actor_name, event.reason) == ("ops", "left over from a deleted cluster")
