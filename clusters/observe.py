"""Observe a location: mirror what whitesky shows there, and flag what no machine owns.

Per location: GPU cards, every page of vGPU reservations, and the VMs of the cluster
cloudspaces there. A location whose listing did not complete is marked partially observed,
and no destructive decision is taken from it. A pass over unchanged data writes nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from cloud.models import Location
from cloud.observe import vms_sync
from clusters.models import ClusterSite
from clusters.orphans import VmOwners, vm_orphans_flag
from gpus.mirror import gpu_profiles_sync, listed_vgpus_sync
from gpus.services import reservations_settle

logger = logging.getLogger(__name__)


@dataclass
class ObservationResult:
    location: str
    complete: bool
    errors: list[str] = field(default_factory=list)
    site_errors: list[str] = field(default_factory=list)
    writes: int = 0
    """Row writes beyond the one that stamps the location with this pass."""


def vgpu_listing_apply(
    *,
    location: Location,
    listing: ws.Listing[ws.Vgpu],
    listed_at: datetime,
    owners: VmOwners | None = None,
) -> int:
    """Observe mirrors the listing (ListedVgpu, orphan flags included); then act brings
    the reservations we keep in line with it. Answers the rows written."""
    owners, now = owners or VmOwners(location), timezone.now()
    pools, machine_ids = owners.pools, owners.machine_ids
    mirrored, shown = listed_vgpus_sync(
        location=location, listing=listing, pools_by_cluster=pools, machine_ids=machine_ids, now=now
    )
    settled = reservations_settle(
        location=location,
        shown=shown,
        complete=listing.complete,
        pools_by_cluster=pools,
        machine_ids=machine_ids,
        listed_at=listed_at,
        now=now,
    )
    return mirrored.writes + settled.writes


def location_observe(*, client: ws.WhiteskyClient, location: Location) -> ObservationResult:
    """List everything first, then write it in one transaction, stamped with the time the
    listings began: a reconciler reads either the whole old picture or the whole new one.

    A cloudspace that cannot be listed flags its own sites; the location's GPU listings,
    and every other cloudspace, are still decided on.
    """
    started = timezone.now()
    result = ObservationResult(location=location.name, complete=True)
    profiles: list[ws.GpuProfile] | None = None
    try:
        profiles = client.list_gpu_profiles(location=location.name)
    except ws.WhiteskyError as exc:
        result.errors.append(f"GPU profiles: {exc}")
    listing = client.list_vgpus(location=location.name)
    if not listing.complete:
        result.errors.append(f"vGPU listing: {listing.error}")
    cloudspaces = (
        ClusterSite.objects.filter(location=location)
        .values_list("cloudspace_id", flat=True)
        .distinct()
    )
    vms: dict[str, list[ws.Vm] | ws.WhiteskyError] = {}
    for cloudspace_id in cloudspaces:
        try:
            vms[cloudspace_id] = client.list_vms(cloudspace_id=cloudspace_id)
        except ws.WhiteskyError as exc:
            vms[cloudspace_id] = exc

    result.complete = not result.errors
    with transaction.atomic():
        if profiles is not None:
            result.writes += gpu_profiles_sync(location=location, profiles=profiles).writes
        # The machines the owner names point at, read once the listings are in, and held
        # until this commits: the reservations written below name them.
        owners = VmOwners(location, hold=True)
        result.writes += vgpu_listing_apply(
            location=location, listing=listing, listed_at=started, owners=owners
        )
        shown: dict[str, set[str]] = defaultdict(set)  # what each cloudspace's sites say now
        for cloudspace_id, shown_error in ClusterSite.objects.filter(location=location).values_list(
            "cloudspace_id", "observation_error"
        ):
            shown[cloudspace_id].add(shown_error)
        for cloudspace_id, listed in vms.items():
            error = ""
            if isinstance(listed, ws.WhiteskyError):
                error = f"VMs of cloudspace {cloudspace_id}: {listed}"
                result.site_errors.append(error)
            else:
                result.writes += vms_sync(
                    location=location, cloudspace_id=cloudspace_id, vms=listed
                )
                result.writes += vm_orphans_flag(
                    location=location,
                    cloudspace_id=cloudspace_id,
                    vms=listed,
                    complete=True,
                    owners=owners,
                )
            if shown[cloudspace_id] != {error}:
                result.writes += ClusterSite.objects.filter(
                    location=location, cloudspace_id=cloudspace_id
                ).update(observation_error=error)
        # One write per location and pass: when its listings began, and whether whole.
        location.observation_complete = result.complete
        location.observation_error = "; ".join(result.errors)
        location.observation_started_at = started
        if result.complete:
            location.last_complete_observation_at = started
        location.save(
            update_fields=[
                "observation_complete",
                "observation_error",
                "observation_started_at",
                "last_complete_observation_at",
            ]
        )
    for problem in result.errors + result.site_errors:
        logger.warning("observe %s: %s", location.name, problem)
    return result
