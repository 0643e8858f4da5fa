"""Observe: mirror what whitesky shows for an account and its locations.

Per location: GPU cards, every page of vGPU reservations, and the VMs of the cluster
cloudspaces there. A location whose listing did not complete is marked partially observed,
and no destructive decision is taken from it. A pass over unchanged data writes nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.rows import fields_assign
from clusters.models import Account, Cloudspace, ClusterSite, Image, Location, VirtualMachine
from clusters.orphans import vm_orphans_flag
from clusters.selectors import machine_ids_by_owner, pools_by_cluster
from gpus.mirror import gpu_profiles_sync, vgpus_sync

logger = logging.getLogger(__name__)


@dataclass
class ObservationResult:
    location: str
    complete: bool
    errors: list[str] = field(default_factory=list)
    site_errors: list[str] = field(default_factory=list)
    writes: int = 0
    """Row writes beyond the one that stamps the location with this pass."""


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


def account_catalog_observe(
    *, client: ws.WhiteskyClient, account: Account, locations: list[Location]
) -> list[str]:
    """Mirror the account's cloudspaces and, per location, its images: what a new site can
    name. A listing that fails changes nothing of what it would have shown; the errors
    are answered (and logged)."""
    errors: list[str] = []
    by_name = {location.name: location for location in locations}
    try:
        cloudspaces = client.list_cloudspaces(locations=list(by_name))
    except ws.WhiteskyError as exc:
        errors.append(f"cloudspaces: {exc}")
    else:
        for name, location in by_name.items():
            listed = {
                c.cloudspace_id: {"name": c.name, "status": c.status}
                for c in cloudspaces
                if c.location == name
            }
            _catalog_sync(Cloudspace, location, "cloudspace_id", listed)
    for name, location in by_name.items():
        try:
            images = client.list_images(location=name)
        except ws.WhiteskyError as exc:
            errors.append(f"images of {name}: {exc}")
            continue
        listed_images = {
            i.image_id: {"name": i.name, "status": i.status, "os_type": i.os_type} for i in images
        }
        _catalog_sync(Image, location, "image_id", listed_images)
    for problem in errors:
        logger.warning("observe %s: %s", account.name, problem)
    return errors


def _catalog_sync(
    model: type[Cloudspace] | type[Image],
    location: Location,
    key: str,
    listed: dict[Any, dict[str, Any]],
) -> int:
    """Make the location's rows of `model` what a whole listing shows; writes only changes."""
    rows = {getattr(row, key): row for row in model.objects.filter(location=location)}
    writes = 0
    with transaction.atomic():
        for ident, data in listed.items():
            row = rows.pop(ident, None)
            if row is None:
                model.objects.create(location=location, **{key: ident}, **data)
                writes += 1
            elif changed := fields_assign(row, data):
                row.save(update_fields=changed)
                writes += 1
        if rows:
            model.objects.filter(pk__in=[row.pk for row in rows.values()]).delete()
            writes += len(rows)
    return writes


def vms_sync(*, location: Location, cloudspace_id: str, vms: list[ws.Vm]) -> int:
    """Mirror the VMs of one cloudspace from a whole listing of it."""
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
                    location=location, cloudspace_id=cloudspace_id, vm_id=vm.vm_id, **data
                )
            )
        elif fields_assign(row, data):
            to_update.append(row)
    VirtualMachine.objects.bulk_create(to_create)
    if to_update:
        VirtualMachine.objects.bulk_update(to_update, ["name", "status"])
    if existing:
        VirtualMachine.objects.filter(pk__in=[vm.pk for vm in existing.values()]).delete()
    return len(to_create) + len(to_update) + len(existing)


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
        result.writes += vgpus_sync(
            location=location,
            listing=listing,
            pools_by_cluster=pools_by_cluster(location.account_id),
            machine_ids=machine_ids_by_owner(location.account_id),
            listed_at=started,
            now=timezone.now(),
        ).writes
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
                    location=location, cloudspace_id=cloudspace_id, vms=listed, complete=True
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
