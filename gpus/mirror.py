"""Mirroring a location's GPU cards and vGPU reservations, and flagging orphans.

Rows change only when what was observed changed. Absence means "gone" only in a complete
listing; a partial one adds and updates what it shows and decides nothing else.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Q

from capvco_web.integrations import whitesky as ws
from capvco_web.rows import fields_assign
from gpus.models import GpuProfile, VgpuReservation
from gpus.naming import owner_parse

if TYPE_CHECKING:
    from cloud.models import Account, Location

State = VgpuReservation.State


@dataclass
class SyncCounts:
    created: int = 0
    updated: int = 0
    deleted: int = 0

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted


def gpu_profiles_sync(*, location: Location, profiles: Sequence[ws.GpuProfile]) -> SyncCounts:
    """Mirror the cards of a location (the listing is whole: it is not paginated)."""
    counts = SyncCounts()
    existing = {p.profile_id: p for p in GpuProfile.objects.filter(location=location)}
    to_create: list[GpuProfile] = []
    to_update: list[GpuProfile] = []
    fields: set[str] = set()
    for card in profiles:
        data = {
            "vendor": card.vendor,
            "model": card.model,
            "pci_address": card.pci_address or "",
            "description": card.description,
            "available_instances": card.available_instances,
        }
        row = existing.pop(card.id, None)
        if row is None:
            to_create.append(GpuProfile(location=location, profile_id=card.id, **data))
        elif changed := fields_assign(row, data):
            fields.update(changed)
            to_update.append(row)
    GpuProfile.objects.bulk_create(to_create)
    if to_update:
        GpuProfile.objects.bulk_update(to_update, sorted(fields))
    if existing:
        GpuProfile.objects.filter(pk__in=[p.pk for p in existing.values()]).delete()
    counts.created, counts.updated, counts.deleted = len(to_create), len(to_update), len(existing)
    return counts


def vgpus_sync(
    *,
    location: Location,
    listing: ws.Listing[ws.Vgpu],
    pools_by_cluster: Mapping[str, Collection[str]],
    machine_ids: Mapping[tuple[str, str], int],
    listed_at: datetime,
    now: datetime,
) -> SyncCounts:
    """Mirror the reservations of a location; from a complete listing, also flag orphans.

    `listed_at` is when the listing began. A row changed after that (a reserve, attach or
    release recorded while the listing was on its way) is newer than the listing says, and
    is left as it is: the next listing tells.

    `pools_by_cluster` and `machine_ids` (by cluster and machine name) are the owners the
    names are read against. An orphan is a reservation whose owning machine does not
    exist. It gets `orphaned_since` once, and one more confirmation per complete listing,
    up to the account's threshold.
    """
    account = location.account
    listed_ids = [v.vgpu_id for v in listing.items]
    candidates = list(
        VgpuReservation.objects.filter(location=location).filter(
            ~Q(state=State.RELEASED) | Q(vgpu_id__in=listed_ids)
        )
    )
    rows = [row for row in candidates if row.updated_at <= listed_at]
    newer = [row for row in candidates if row.updated_at > listed_at]
    newer_ids = {row.vgpu_id for row in newer if row.vgpu_id}
    newer_names = {row.name for row in newer}
    by_id = {r.vgpu_id: r for r in rows if r.vgpu_id}
    pending_by_name = {r.name: r for r in rows if not r.vgpu_id}
    to_create: list[VgpuReservation] = []
    to_update: dict[int, VgpuReservation] = {}
    fields: set[str] = set()

    def changed(row: VgpuReservation, names_changed: list[str]) -> None:
        if names_changed and row.pk:
            fields.update(names_changed)
            to_update[row.pk] = row

    for vgpu in listing.items:
        if vgpu.vgpu_id in newer_ids or vgpu.name in newer_names:
            continue
        row = by_id.pop(vgpu.vgpu_id, None) or pending_by_name.pop(vgpu.name, None)
        owner = owner_parse(vgpu.name, pools_by_cluster)
        machine_id = machine_ids.get((owner.cluster, owner.machine)) if owner else None
        data = {
            "vgpu_id": vgpu.vgpu_id,
            "name": vgpu.name,
            "gpu_id": vgpu.gpu_id,
            "vm_id": vgpu.vm_id,
            "owner_cluster": owner.cluster if owner else "",
            "owner_machine": owner.machine if owner else "",
            "owner_index": owner.index if owner else None,
            "machine_id": machine_id,
            "reserve_deadline": None,
        }
        if row is None:
            row = VgpuReservation(location=location, first_seen_at=now, **data)
            to_create.append(row)
        else:
            changes = fields_assign(row, data)
            if row.first_seen_at is None:
                changes += fields_assign(row, {"first_seen_at": now})
            changed(row, changes)
        # A release in flight stays `releasing` until the listing no longer shows it.
        if row.state != State.RELEASING:
            state = State.ATTACHED if vgpu.vm_id else State.RESERVED
            changed(row, fields_assign(row, {"state": state, "released_at": None}))
        if vgpu.vm_id:
            changed(row, fields_assign(row, {"unassigned_since": None}))
        elif row.unassigned_since is None:
            changed(row, fields_assign(row, {"unassigned_since": now}))
        if listing.complete:
            changed(row, _orphan_flags(row, account, now))

    if listing.complete:
        # Listed nowhere in a whole listing: the reservation is gone.
        for row in by_id.values():
            if row.state != State.RELEASED:
                changed(
                    row,
                    fields_assign(
                        row,
                        {
                            "state": State.RELEASED,
                            "released_at": now,
                            "orphaned_since": None,
                            "orphan_confirmations": 0,
                        },
                    ),
                )

    # A reserve the whole listing lacks although it began after the call could land: it
    # never happened (whoever sent it, a machine since deleted with force included).
    never = [
        row.pk
        for row in pending_by_name.values()
        if listing.complete and (row.reserve_deadline is None or row.reserve_deadline < listed_at)
    ]
    for row in to_update.values():
        row.updated_at = now
    VgpuReservation.objects.bulk_create(to_create)
    if to_update:
        VgpuReservation.objects.bulk_update(
            list(to_update.values()), sorted(fields | {"updated_at"})
        )
    if never:
        VgpuReservation.objects.filter(
            pk__in=never, vgpu_id__isnull=True, updated_at__lte=listed_at
        ).delete()
    return SyncCounts(created=len(to_create), updated=len(to_update), deleted=len(never))


def _orphan_flags(row: VgpuReservation, account: Account, now: datetime) -> list[str]:
    if row.machine_id is not None:
        return fields_assign(row, {"orphaned_since": None, "orphan_confirmations": 0})
    return fields_assign(
        row,
        {
            "orphaned_since": row.orphaned_since or now,
            "orphan_confirmations": min(row.orphan_confirmations + 1, account.orphan_confirmations),
        },
    )
