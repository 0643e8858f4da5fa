"""Observe: mirror what whitesky lists; decide "gone" only from a complete listing."""

from __future__ import annotations

from typing import Any

from cloud.models import Account, Cloudspace, Image, Location, VirtualMachine
from cloud.whitesky import whitesky_client
from clusters.services import account_create
from gpus.models import GpuProfile, VgpuReservation
from tests.gpus.conftest import NL, Plane


def test_a_reservation_released_elsewhere_is_mirrored_as_released(plane: Plane) -> None:
    plane.observe()
    card = GpuProfile.objects.filter(location__name=NL).first()
    assert card is not None
    with whitesky_client(plane.account) as client:
        vgpu_id = client.reserve_vgpu(location=NL, gpu_id=card.profile_id, name="capvco-x-y-gpu-0")
        plane.observe()
        assert VgpuReservation.objects.get(vgpu_id=vgpu_id).state == "reserved"
        client.release_vgpu(location=NL, vgpu_id=vgpu_id)

    plane.observe()

    row = VgpuReservation.objects.get(vgpu_id=vgpu_id)
    assert (row.state, row.orphaned_since) == ("released", None)
    assert row.released_at is not None


def test_a_failing_vm_listing_flags_its_site_only_and_forgets_nothing(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "cpu", replicas=2)
    plane.converge(cluster)
    plane.observe()
    assert VirtualMachine.objects.filter(location__name=NL).count() == 2

    plane.sim.fault(operation="listCloudspaceVirtualMachines", status=503, retry_after=0)
    plane.observe()

    site = cluster.sites.get(location__name=NL)
    assert "VMs of cloudspace cs-demo-nl" in site.observation_error
    # The location's GPU listings were whole: GPU decisions there go on.
    location = Location.objects.get(name=NL)
    assert (location.observation_complete, location.observation_error) == (True, "")
    assert VirtualMachine.objects.filter(location__name=NL).count() == 2  # nothing dropped
    plane.sim.clear_faults()
    plane.observe()
    site.refresh_from_db()
    assert site.observation_error == ""


def test_cards_follow_the_listing_and_free_instances_fall_as_machines_reserve(
    plane: Plane,
) -> None:
    plane.observe()
    free_before = sum(c.available_instances for c in GpuProfile.objects.filter(location__name=NL))
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=2)
    plane.converge(cluster)
    plane.observe()
    free_after = sum(c.available_instances for c in GpuProfile.objects.filter(location__name=NL))
    assert free_before - free_after == 2


def test_a_new_account_is_observed_at_once_not_at_the_next_beat_tick(
    whitesky_sim: Any, admin_user: Any, run_tasks: Any
) -> None:
    """Created through the service (API, admin): its locations, cards, cloudspaces and
    images are listed when the create commits, before any beat tick."""
    account = Account(
        name="fresh",
        api_url=whitesky_sim.api_url,
        iam_url=whitesky_sim.iam_url,
        customer_id=whitesky_sim.customer_id,
        credential=whitesky_sim.token(),
    )
    with run_tasks():
        account_create(account=account, actor=admin_user)
    locations = Location.objects.filter(account=account)
    assert locations.count() >= 2
    assert all(location.observation_complete for location in locations)
    assert GpuProfile.objects.filter(location__account=account).exists()
    for location in locations:
        assert Cloudspace.objects.filter(location=location).exists()
        assert Image.objects.filter(location=location).exists()
