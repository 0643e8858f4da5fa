"""Mirroring a location's GPU cards and vGPU reservations, and flagging orphans.

What a listing shows is kept in rows of observe's own (GpuProfile, ListedVgpu), orphan
flags included, and nothing else is written here: the reservations we keep
(VgpuReservation) are brought in line with these rows by act
(gpus.services.reservations_settle). Rows change only when what was observed changed.
Absence means "gone" only in a complete listing; a partial one adds and updates what it
shows and decides nothing else.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from capvco_web.integrations import whitesky as ws
from capvco_web.rows import fields_assign
from gpus.models import GpuProfile, ListedVgpu
from gpus.naming import owner_parse

if TYPE_CHECKING:
    from cloud.models import Location


@dataclass
class SyncCounts:
    created: int = 0
    updated: int = 0
    deleted: int = 0

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted

    def __add__(self, other: SyncCounts) -> SyncCounts:
        return SyncCounts(
            self.created + other.created, self.updated + other.updated, self.deleted + other.deleted
        )


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


def listed_vgpus_sync(
    *,
    location: Location,
    listing: ws.Listing[ws.Vgpu],
    pools_by_cluster: Mapping[str, Collection[str]],
    machine_ids: Mapping[tuple[str, str], int],
    now: datetime,
) -> tuple[SyncCounts, list[ListedVgpu]]:
    """Mirror what the listing shows into ListedVgpu, observe's own rows; answers the
    writes, and the rows of the reservations the listing showed, as they are now.

    A listed reservation whose name resolves to no machine gets `orphaned_since` once, and
    one more confirmation per complete listing, up to the account's threshold: a pass over
    unchanged data writes nothing. A partial listing adds and updates what it shows, and
    decides nothing (no flag, no removal); a complete one deletes what it lacks.
    """
    threshold = location.account.orphan_confirmations
    existing = {row.vgpu_id: row for row in ListedVgpu.objects.filter(location=location)}
    to_create: list[ListedVgpu] = []
    to_update: list[ListedVgpu] = []
    shown: list[ListedVgpu] = []
    fields: set[str] = set()
    for vgpu in listing.items:
        row = existing.pop(vgpu.vgpu_id, None)
        data: dict[str, object] = {"name": vgpu.name, "gpu_id": vgpu.gpu_id, "vm_id": vgpu.vm_id}
        if vgpu.vm_id:
            data["unassigned_since"] = None
        elif row is None or row.unassigned_since is None:
            data["unassigned_since"] = now
        if listing.complete:
            owner = owner_parse(vgpu.name, pools_by_cluster)
            if owner and (owner.cluster, owner.machine) in machine_ids:
                data |= {"orphaned_since": None, "orphan_confirmations": 0}
            else:
                data |= {
                    "orphaned_since": (row and row.orphaned_since) or now,
                    "orphan_confirmations": min(
                        (row.orphan_confirmations if row else 0) + 1, threshold
                    ),
                }
        if row is None:
            row = ListedVgpu(location=location, vgpu_id=vgpu.vgpu_id, first_seen_at=now, **data)
            to_create.append(row)
        elif changed := fields_assign(row, data):
            fields.update(changed)
            to_update.append(row)
        shown.append(row)
    ListedVgpu.objects.bulk_create(to_create)
    if to_update:
        ListedVgpu.objects.bulk_update(to_update, sorted(fields))
    gone = [row.pk for row in existing.values()] if listing.complete else []
    if gone:
        ListedVgpu.objects.filter(pk__in=gone).delete()
    counts = SyncCounts(created=len(to_create), updated=len(to_update), deleted=len(gone))
    return counts, shown
