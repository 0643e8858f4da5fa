"""Mirror what whitesky shows an account: its locations and their vGPU price, its
cloudspaces and images (the catalog a site names), and the VMs of a cloudspace. Each from
a whole listing; a pass over unchanged data writes nothing."""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.rows import fields_assign
from cloud.models import Account, Cloudspace, Image, Location, VirtualMachine

logger = logging.getLogger(__name__)


def account_locations_observe(*, client: ws.WhiteskyClient, account: Account) -> list[Location]:
    """Mirror the account's locations and their prices."""
    now_listed = client.list_customer_locations()
    existing = {loc.name: loc for loc in account.locations.all()}
    for remote in now_listed:
        data = {
            "currency": remote.currency,
            "vgu_price": Decimal(str(remote.prices.get("vgu", 0))).quantize(Decimal("0.0001")),
            "prices": {unit: str(price) for unit, price in sorted(remote.prices.items())},
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


def vms_sync(
    *, location: Location, cloudspace_id: str, vms: list[ws.Vm], now: datetime | None = None
) -> int:
    """Mirror the VMs of one cloudspace from a whole listing of it. A VM shown changed
    gets `changed_at`: no removal is decided on it before a later listing."""
    now = now or timezone.now()
    existing = {
        vm.vm_id: vm
        for vm in VirtualMachine.objects.filter(location=location, cloudspace_id=cloudspace_id)
    }
    to_create, to_update = [], []
    for vm in vms:
        row = existing.pop(vm.vm_id, None)
        data = {
            "name": vm.name,
            "status": vm.status,
            "vcpus": vm.vcpus,
            "memory_mib": vm.memory_mib,
        }
        if row is None:
            to_create.append(
                VirtualMachine(
                    location=location,
                    cloudspace_id=cloudspace_id,
                    vm_id=vm.vm_id,
                    first_seen_at=now,
                    changed_at=now,
                    **data,
                )
            )
        elif fields_assign(row, data):
            row.changed_at = now
            to_update.append(row)
    VirtualMachine.objects.bulk_create(to_create)
    if to_update:
        VirtualMachine.objects.bulk_update(
            to_update, ["name", "status", "vcpus", "memory_mib", "changed_at"]
        )
    if existing:
        VirtualMachine.objects.filter(pk__in=[vm.pk for vm in existing.values()]).delete()
    return len(to_create) + len(to_update) + len(existing)
