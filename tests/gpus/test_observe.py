"""Observe: mirror what whitesky lists; decide "gone" only from a complete listing."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from cloud.models import Account, Cloudspace, Image, Location, VirtualMachine
from cloud.services import account_create
from cloud.whitesky import whitesky_client
from gpus.mirror import listed_vgpus_sync
from gpus.models import GpuProfile, ListedVgpu, VgpuReservation
from gpus.services import reservations_settle
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


def test_the_mirror_writes_what_the_listing_shows_and_act_alone_keeps_the_reservations(
    plane: Plane,
) -> None:
    """One writer per row: the mirror writes ListedVgpu (orphan flags included) and no
    reservation; gpus.services.reservations_settle alone makes and changes those."""
    plane.observe()
    location = plane.location(NL)
    card = GpuProfile.objects.filter(location=location).first()
    assert card is not None
    with whitesky_client(plane.account) as client:
        for name in ("team-x-gpu", "capvco-gone-m-0-gpu-0"):
            client.reserve_vgpu(location=NL, gpu_id=card.profile_id, name=name)
        began = timezone.now()
        listing = client.list_vgpus(location=NL)  # whole, begun after both reserves
    assert listing.complete
    owners: dict[str, Any] = {"pools_by_cluster": {}, "machine_ids": {}}

    mirrored, shown = listed_vgpus_sync(location=location, listing=listing, now=began, **owners)

    assert (mirrored.created, VgpuReservation.objects.count()) == (2, 0)
    listed = {row.name: row for row in ListedVgpu.objects.all()}
    assert {row.name: row.orphan_confirmations for row in listed.values()} == {
        "team-x-gpu": 1,
        "capvco-gone-m-0-gpu-0": 1,
    }

    settled = reservations_settle(
        location=location, shown=shown, complete=True, listed_at=began, now=began, **owners
    )

    assert settled.created == 2
    rows = {row.name: row for row in VgpuReservation.objects.select_related("listed")}
    assert {name: row.state for name, row in rows.items()} == {
        "team-x-gpu": "reserved",
        "capvco-gone-m-0-gpu-0": "reserved",
    }
    assert rows["team-x-gpu"].orphaned_since == listed["team-x-gpu"].orphaned_since

    # A partial listing that lacks one: nothing is flagged again, nothing is dropped.
    partial = ws.Listing(items=listing.items[:1], complete=False)
    later = timezone.now()
    mirrored, _ = listed_vgpus_sync(location=location, listing=partial, now=later, **owners)
    assert mirrored.writes == 0
    assert ListedVgpu.objects.count() == 2
    # A whole listing that lacks it (taken after it was last changed): it is gone.
    whole = ws.Listing(items=listing.items[:1], complete=True)
    mirrored, _ = listed_vgpus_sync(location=location, listing=whole, now=later, **owners)
    assert (mirrored.deleted, mirrored.updated) == (1, 1)  # the other confirmed once more
    assert VgpuReservation.objects.filter(state="released").count() == 0  # act has not settled
