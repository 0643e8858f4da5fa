"""The ledger of leaks: every vGPU and VM named by us that whitesky bills and no machine
owns gets a `Leak` row when it is first flagged orphaned, and the row is ended when the
object is released, gone from a complete listing, or owned again; what it cost stays on
the record.

The flags are observe's (gpus.mirror, clusters.orphans), taken from complete listings
only, so the ledger follows them: it opens and ends rows, and decides nothing itself. When
a leak starts and ends is said here once, and every figure reads it through `Leak.cost`:

* it starts when a complete listing first flagged it (`orphaned_since`);
* it ends when we released it (the vGPU's release, the VM's removal: also while a
  listing still shows it), else at the start of the first complete listing that shows it
  gone or owned again;
* while open it counts up to its location's last complete observation, and an end is
  never put before that: what a leak cost so far never goes down.

The ledger pass runs as often as observe (LEAK_LEDGER_INTERVAL), so a leak ended by a
release or a listing is told ended, and how, within one pass. A pass that finds the same
orphans writes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import DatabaseError, transaction
from django.db.models import Min

from billing.models import Leak
from cloud.models import Location, VirtualMachine
from clusters.models import VmRemovalRequest
from clusters.orphans import vm_orphans_list
from gpus.models import ListedVgpu, VgpuReservation
from gpus.naming import PREFIX
from gpus.selectors import orphans_list

logger = logging.getLogger(__name__)
Key = tuple[int, str, str]  # location, kind, external id


@dataclass(frozen=True)
class LeaksRecorded:
    opened: int
    ended: int
    # A row that could not be written or decided, each said with what went wrong: the
    # others are recorded all the same.
    failures: list[str] = field(default_factory=list)


def _failure(leak: Leak, exc: Exception) -> str:
    which = f"leak {leak.pk}" if leak.pk else "new leak"
    said = f"{which} ({leak.kind} {leak.external_id}, {leak.location.name}): {exc!r}"
    logger.error("leak ledger: %s", said, exc_info=exc)
    return said


def _create(new: list[Leak], failures: list[str]) -> int:
    """Open the new rows at once; if that fails, one by one, so that a row that cannot be
    written keeps out only itself."""
    if not new:
        return 0
    try:
        with transaction.atomic():
            Leak.objects.bulk_create(new)
        return len(new)
    except DatabaseError:
        opened = 0
        for leak in new:
            try:
                with transaction.atomic():
                    leak.save(force_insert=True)
                opened += 1
            except DatabaseError as exc:
                failures.append(_failure(leak, exc))
        return opened


def _orphans(location: Location | None = None) -> dict[Key, Leak]:
    """A leak, not saved, per orphan named by us flagged now (of `location` if given),
    less the VMs we removed since. An object named otherwise is none of ours: whitesky's
    bill tells it "billed, not explained" (billing.bills)."""
    found: dict[Key, Leak] = {}
    for vgpu in orphans_list(location=location).filter(name__startswith=PREFIX):
        assert vgpu.vgpu_id is not None and vgpu.orphaned_since is not None
        location = vgpu.location
        found[location.pk, Leak.Kind.VGPU, vgpu.vgpu_id] = Leak(
            account_id=location.account_id,
            location=location,
            kind=Leak.Kind.VGPU,
            external_id=vgpu.vgpu_id,
            name=vgpu.name,
            currency=location.currency,
            monthly_price=location.vgu_price,
            billed_since=min(vgpu.created_at, vgpu.first_seen_at or vgpu.created_at),
            leaked_since=vgpu.orphaned_since,
        )
    vms = list(vm_orphans_list(location=location).filter(name__startswith=PREFIX))
    removed = _removed_since_flagged(vms)
    for vm in vms:
        assert vm.orphaned_since is not None
        if (vm.location_id, vm.vm_id) in removed:
            continue
        location = vm.location
        found[location.pk, Leak.Kind.VM, str(vm.vm_id)] = Leak(
            account_id=location.account_id,
            location=location,
            kind=Leak.Kind.VM,
            external_id=str(vm.vm_id),
            name=vm.name,
            currency=location.currency,
            monthly_price=vm.compute_monthly_price().quantize(Decimal("0.0001")),
            billed_since=vm.orphaned_since,  # the VM listing carries no creation time
            leaked_since=vm.orphaned_since,
        )
    return found


def _removed_since_flagged(vms: list[VirtualMachine]) -> set[tuple[int, int]]:
    """(location, VM id) of the flagged VMs we removed since they were flagged (a listing
    may still show them, or none may list their cloudspace again: their cluster is gone).
    One query."""
    if not vms:
        return set()
    flagged = {(vm.location_id, vm.vm_id): vm.orphaned_since for vm in vms}
    done = VmRemovalRequest.objects.filter(
        location_id__in={vm.location_id for vm in vms},
        vm_id__in={vm.vm_id for vm in vms},
        done_at__isnull=False,
        error="",
    ).values_list("location_id", "vm_id", "done_at")
    return {
        (location_id, vm_id)
        for location_id, vm_id, done_at in done
        if done_at is not None
        and (since := flagged.get((location_id, vm_id))) is not None
        and done_at >= since
    }


def leaks_during(location: Location, start: datetime, end: datetime) -> list[Leak]:
    """The location's leaks in [start, end): the ledger's rows, and those flagged now
    that the ledger has not opened yet (not saved)."""
    rows = list(
        Leak.objects.filter(location=location, leaked_since__lt=end)
        .exclude(ended_at__lte=start)
        .select_related("location")
    )
    recorded = {(leak.kind, leak.external_id) for leak in rows if leak.ended_at is None}
    for (_, kind, external_id), leak in _orphans(location).items():
        if (kind, external_id) not in recorded and leak.leaked_since < end:
            rows.append(leak)
    return rows


def _end(leak: Leak, location: Location) -> tuple[datetime, str] | None:
    """When and how an open leak no longer flagged ended; None: not decidable yet."""
    if leak.kind == Leak.Kind.VGPU:
        released = (
            VgpuReservation.objects.filter(
                location=location,
                vgpu_id=leak.external_id,
                state=VgpuReservation.State.RELEASED,
            )
            .order_by()
            .aggregate(at=Min("released_at"))["at"]
        )
        if released is not None:
            return released, Leak.End.RELEASED
        listed = ListedVgpu.objects.filter(location=location, vgpu_id=leak.external_id).exists()
    else:
        removed = (
            VmRemovalRequest.objects.filter(
                location=location, vm_id=int(leak.external_id), done_at__isnull=False
            )
            .order_by()
            .aggregate(at=Min("done_at"))["at"]
        )
        if removed is not None:
            return removed, Leak.End.RELEASED
        listed = VirtualMachine.objects.filter(
            location=location, vm_id=int(leak.external_id)
        ).exists()
    if not location.observation_complete or location.observation_started_at is None:
        return None  # gone or owned, said by a partial listing: decide nothing
    return location.observation_started_at, Leak.End.OWNED if listed else Leak.End.GONE


def leaks_record() -> LeaksRecorded:
    """Open a ledger row for each new orphan, end those no longer flagged."""
    current = _orphans()
    open_rows = {
        (leak.location_id, leak.kind, leak.external_id): leak
        for leak in Leak.objects.filter(ended_at__isnull=True).select_related("location")
    }
    new = [leak for key, leak in current.items() if key not in open_rows]
    ended = 0
    failures: list[str] = []
    with transaction.atomic():
        opened = _create(new, failures)
        for key, leak in open_rows.items():
            if key in current:
                continue
            try:
                # A savepoint per row: a row that cannot be decided undoes only itself.
                with transaction.atomic():
                    end = _end(leak, leak.location)
                    if end is None:
                        continue
                    at, how = end
                    # Never before what was counted of it while open; compare-and-set:
                    # ended once.
                    ended += Leak.objects.filter(pk=leak.pk, ended_at__isnull=True).update(
                        ended_at=max(at, leak.counted_until()), end=how
                    )
            except Exception as exc:  # any fault of one row: reported, not raised
                failures.append(_failure(leak, exc))
    return LeaksRecorded(opened=opened, ended=ended, failures=failures)
