"""Observe: mirror what whitesky shows for an account and its locations.

Per location: GPU cards, every page of vGPU reservations, and the VMs of the cluster
cloudspaces there. A location whose listing did not complete is marked partially observed,
and no destructive decision is taken from it. A pass over unchanged data writes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal

from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.rows import fields_assign
from clusters.models import Account, ClusterSite, Location, VirtualMachine
from clusters.orphans import vm_orphans_flag
from clusters.selectors import pools_by_cluster
from gpus.mirror import gpu_profiles_sync, vgpus_sync

logger = logging.getLogger(__name__)


@dataclass
class ObservationResult:
    location: str
    complete: bool
    errors: list[str] = field(default_factory=list)
    writes: int = 0


def account_locations_observe(*, client: ws.WhiteskyClient, account: Account) -> list[Location]:
    """Mirror the account's locations and their vGPU price."""
    now_listed = client.list_customer_locations()
    existing = {loc.name: loc for loc in account.locations.all()}
    for remote in now_listed:
        data = {
            "currency": remote.currency,
            "vgu_price": Decimal(str(remote.prices.get("vgu", 0))).quantize(Decimal("0.0001")),
        }
        row = existing.get(remote.name)
        if row is None:
            existing[remote.name] = Location.objects.create(
                account=account, name=remote.name, **data
            )
        elif changed := fields_assign(row, data):
            row.save(update_fields=changed)
    return list(existing.values())


def vms_sync(*, location: Location, cloudspace_id: str, vms: list[ws.Vm]) -> int:
    now = timezone.now()
    existing = {
        vm.vm_id: vm
        for vm in VirtualMachine.objects.filter(location=location, cloudspace_id=cloudspace_id)
    }
    to_create, to_update = [], []
    for vm in vms:
        row = existing.pop(vm.vm_id, None)
        data = {"name": vm.name, "status": vm.status}
        if row is None:
            to_create.append(
                VirtualMachine(
                    location=location,
                    cloudspace_id=cloudspace_id,
                    vm_id=vm.vm_id,
                    last_seen_at=now,
                    **data,
                )
            )
        elif fields_assign(row, data):
            row.last_seen_at = now
            to_update.append(row)
    VirtualMachine.objects.bulk_create(to_create)
    if to_update:
        VirtualMachine.objects.bulk_update(to_update, ["name", "status", "last_seen_at"])
    if existing:
        VirtualMachine.objects.filter(pk__in=[vm.pk for vm in existing.values()]).delete()
    return len(to_create) + len(to_update) + len(existing)


def location_observe(*, client: ws.WhiteskyClient, location: Location) -> ObservationResult:
    now = timezone.now()
    result = ObservationResult(location=location.name, complete=True)
    try:
        profiles = client.list_gpu_profiles(location=location.name)
        result.writes += gpu_profiles_sync(location=location, profiles=profiles, now=now).writes
    except ws.WhiteskyError as exc:
        result.errors.append(f"GPU profiles: {exc}")

    listing = client.list_vgpus(location=location.name)
    if not listing.complete:
        result.errors.append(f"vGPU listing: {listing.error}")
    result.writes += vgpus_sync(
        location=location,
        listing=listing,
        pools_by_cluster=pools_by_cluster(location.account_id),
        now=now,
    ).writes

    cloudspaces = (
        ClusterSite.objects.filter(location=location)
        .values_list("cloudspace_id", flat=True)
        .distinct()
    )
    for cloudspace_id in cloudspaces:
        try:
            vms = client.list_vms(cloudspace_id=cloudspace_id)
        except ws.WhiteskyError as exc:
            result.errors.append(f"VMs of cloudspace {cloudspace_id}: {exc}")
            continue
        result.writes += vms_sync(location=location, cloudspace_id=cloudspace_id, vms=vms)
        result.writes += vm_orphans_flag(
            location=location, cloudspace_id=cloudspace_id, vms=vms, complete=True
        )

    result.complete = not result.errors
    marker = {
        "observation_complete": result.complete,
        "observation_error": "; ".join(result.errors),
    }
    if changed := fields_assign(location, marker):
        location.save(update_fields=changed)
        result.writes += 1
    if result.errors:
        logger.warning("observe %s: partial: %s", location.name, marker["observation_error"])
    return result
