"""Mirroring a location's GPU cards and vGPU reservations, and flagging orphans.

What a listing shows is kept in rows of observe's own (GpuProfile, ListedVgpu), orphan
flags included; the reservation rows (VgpuReservation) take from it their vGPU id, VM and
state. Rows change only when what was observed changed. Absence means "gone" only in a complete
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
from gpus.models import GpuProfile, ListedVgpu, VgpuReservation
from gpus.naming import owner_parse

if TYPE_CHECKING:
    from cloud.models import Location

State = VgpuReservation.State


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


def vgpus_sync(
    *,
    location: Location,
    listing: ws.Listing[ws.Vgpu],
    pools_by_cluster: Mapping[str, Collection[str]],
    machine_ids: Mapping[tuple[str, str], int],
    listed_at: datetime,
    now: datetime,
) -> SyncCounts:
    """Mirror the reservations of a location: what the listing shows (ListedVgpu, with the
    orphan flags), and the state of the reservation rows it concerns.

    `pools_by_cluster` and `machine_ids` (by cluster and machine name) are the owners the
    names are read against. An orphan is a listed reservation whose owning machine does
    not exist.
    """
    counts = listed_vgpus_sync(
        location=location,
        listing=listing,
        pools_by_cluster=pools_by_cluster,
        machine_ids=machine_ids,
        now=now,
    )
    counts += reservations_sync(
        location=location,
        listing=listing,
        pools_by_cluster=pools_by_cluster,
        machine_ids=machine_ids,
        listed_at=listed_at,
        now=now,
    )
    return counts


def listed_vgpus_sync(
    *,
    location: Location,
    listing: ws.Listing[ws.Vgpu],
    pools_by_cluster: Mapping[str, Collection[str]],
    machine_ids: Mapping[tuple[str, str], int],
    now: datetime,
) -> SyncCounts:
    """Mirror what the listing shows into ListedVgpu, observe's own rows.

    A listed reservation whose name resolves to no machine gets `orphaned_since` once, and
    one more confirmation per complete listing, up to the account's threshold: a pass over
    unchanged data writes nothing. A partial listing adds and updates what it shows, and
    decides nothing (no flag, no removal); a complete one deletes what it lacks.
    """
    threshold = location.account.orphan_confirmations
    existing = {row.vgpu_id: row for row in ListedVgpu.objects.filter(location=location)}
    to_create: list[ListedVgpu] = []
    to_update: list[ListedVgpu] = []
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
            to_create.append(
                ListedVgpu(location=location, vgpu_id=vgpu.vgpu_id, first_seen_at=now, **data)
            )
        elif changed := fields_assign(row, data):
            fields.update(changed)
            to_update.append(row)
    ListedVgpu.objects.bulk_create(to_create)
    if to_update:
        ListedVgpu.objects.bulk_update(to_update, sorted(fields))
    gone = [row.pk for row in existing.values()] if listing.complete else []
    if gone:
        ListedVgpu.objects.filter(pk__in=gone).delete()
    return SyncCounts(created=len(to_create), updated=len(to_update), deleted=len(gone))


def reservations_sync(
    *,
    location: Location,
    listing: ws.Listing[ws.Vgpu],
    pools_by_cluster: Mapping[str, Collection[str]],
    machine_ids: Mapping[tuple[str, str], int],
    listed_at: datetime,
    now: datetime,
) -> SyncCounts:
    """Bring the reservation rows in line with the listing: their vGPU id, card, VM and
    state, and rows for reservations we did not make (their owner parsed from the name).

    `listed_at` is when the listing began. A row changed after that (a reserve, attach or
    release recorded while the listing was on its way) is newer than the listing says, and
    is left as it is: the next listing tells.
    """
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
            row = VgpuReservation(location=location, **data)
            to_create.append(row)
        else:
            changed(row, fields_assign(row, data))
        # A release in flight stays `releasing` until the listing no longer shows it.
        if row.state != State.RELEASING:
            state = State.ATTACHED if vgpu.vm_id else State.RESERVED
            changed(row, fields_assign(row, {"state": state, "released_at": None}))

    if listing.complete:
        # Listed nowhere in a whole listing: the reservation is gone.
        for row in by_id.values():
            if row.state != State.RELEASED:
                changed(row, fields_assign(row, {"state": State.RELEASED, "released_at": now}))

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
