"""Reconciliation with whitesky's bill: per location and finished hour, what whitesky
billed (its consumption, `getCustomerConsumption`) against what we own, and the rest,
"billed, not explained", with the objects behind it.

Every VM line and every unassigned vGPU of the hour's consumption is priced at the
location's monthly prices (an hour is a 730th of a month) for the units we mirror and
count: `vcu`, `mu` and `vgu` (a vGPU on a VM is billed under the VM). Disks and IOPS
(`su`, `tu`), public addresses, Windows, flash, object storage and network are left out:
the VM listing carries none of them, so what we own of them is not known. Each billed
object is then:

* leaked, in part or whole: what the leak ledger's leaks named by us (`capvco-…`) cost in
  that hour, as the ledger itself counts it (`Leak.cost` over the hour: the ledger's rows,
  and the orphans flagged that it has not opened yet), on the object's line (a vGPU on a
  VM is billed under the VM), at most what the line was billed;
* owned, the rest of the line: a VM that one of our machines holds at the location (or
  held in that hour and was removed by its teardown or deleted with force, as the audit
  records), or a vGPU reservation that a machine holds (or one named by us and released
  since the hour began), or the moments of a leak's line before the leak was flagged;
* unexplained: nothing of ours. A VM or a vGPU made outside the control plane shows up
  here whatever it is called (the mirror also flags a vGPU named otherwise as orphaned,
  money billed for nothing; the bill tells it apart from our own leaks).

A bill item keeps the units we price, to the thousandth, and a vGPU's name from our own
reservation when we made it (a released one is no longer listed).

"Unexplained" is decided only from a complete picture: the consumption answered whole,
and the location's last observation complete, with every cluster cloudspace listed, and
begun after the hour ended (so a VM we made in that hour is already mirrored). Otherwise
nothing is written and the hour is tried again on the next pass. A check is written once
(`BillCheck`, unique per location and hour, with a `BillItem` per leak and unexplained
object; owned objects are only summed): a pass that finds it writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from billing.leaks import leaks_during
from billing.models import UNIT_NAMES, BillCheck, BillItem, Leak
from billing.rollups import HOUR, hour_of
from capvco_web.integrations import whitesky as ws
from capvco_web.models import AuditEvent
from cloud.models import Account, Location
from clusters.models import ClusterSite, Machine
from gpus.models import BILLED_STATES, ListedVgpu, VgpuReservation, hourly_price
from gpus.naming import PREFIX

# The units priced: those the mirror knows we own (a VM's vCPUs and memory, vGPUs).
PRICED_UNITS = tuple(UNIT_NAMES)
MICRO = Decimal("0.000001")
# The audit records that name a VM a machine of ours held until it was removed.
VM_REMOVALS = ("machine.vm_remove", "machine.recreate", "machine.force_delete")
Verdict = BillItem.Verdict


@dataclass(frozen=True)
class BilledObject:
    """One VM line or unassigned vGPU of an hour's consumption, priced."""

    kind: str  # BillItem.Kind
    external_id: str
    name: str
    cloudspace_id: str
    units: Mapping[str, float]
    cost: Decimal


@dataclass
class BillCheckResult:
    """What one hour's check found; `written` only when this call wrote the check."""

    location: str
    start: datetime
    written: bool = False
    waiting: str = ""  # why nothing was decided (the hour is tried again)
    error: ws.WhiteskyError | None = None
    billed: Decimal = Decimal(0)
    owned: Decimal = Decimal(0)
    leaked: Decimal = Decimal(0)
    unexplained: Decimal = Decimal(0)
    items: list[tuple[str, BilledObject]] = field(default_factory=list)  # (verdict, object)


def unit_monthly_price(location: Location, unit: str) -> Decimal:
    """A unit's monthly price here; `vgu` as the mirrored vGPU price the costs use."""
    return location.vgu_price if unit == "vgu" else location.unit_price(unit)


def units_cost(location: Location, units: Mapping[str, float]) -> Decimal:
    """What billed unit-hours cost at the location's prices, counted units only."""
    total = sum(
        (
            Decimal(str(units.get(unit, 0.0))) * hourly_price(unit_monthly_price(location, unit))
            for unit in PRICED_UNITS
        ),
        Decimal(0),
    )
    return total.quantize(MICRO)


def counted_units(units: Mapping[str, float]) -> dict[str, float]:
    """The unit-hours a bill item keeps: those priced here, to the thousandth (whitesky
    answers them to the float's last digit)."""
    return {unit: round(units[unit], 3) for unit in PRICED_UNITS if units.get(unit)}


def billed_objects(location: Location, consumption: ws.Consumption) -> list[BilledObject]:
    """Every VM line and unassigned vGPU that costs something in the counted units."""
    found = []
    for cloudspace in consumption.cloudspaces:
        for vm_id, units in cloudspace.vms.items():
            found.append(
                BilledObject(
                    kind=BillItem.Kind.VM,
                    external_id=str(vm_id),
                    name=cloudspace.vm_names.get(vm_id, ""),
                    cloudspace_id=cloudspace.cloudspace_id,
                    units=dict(units),
                    cost=units_cost(location, units),
                )
            )
    for vgpu_id, vgu in consumption.unassigned_vgpus.items():
        units = {"vgu": vgu}
        found.append(
            BilledObject(
                kind=BillItem.Kind.VGPU,
                external_id=vgpu_id,
                name="",
                cloudspace_id="",
                units=units,
                cost=units_cost(location, units),
            )
        )
    return [item for item in found if item.cost > 0]


def locations_unlisted(locations: list[Location]) -> set[int]:
    """The locations of which a cluster cloudspace could not be listed, in one query."""
    return set(
        ClusterSite.objects.filter(location__in=locations)
        .exclude(observation_error="")
        .values_list("location_id", flat=True)
    )


def picture_incomplete(location: Location, end: datetime, *, unlisted: bool) -> str:
    """Why the location's mirror cannot yet say what we owned until `end` ("" if it can);
    `unlisted`: a cluster cloudspace of it could not be listed (locations_unlisted)."""
    if not location.observation_complete or location.observation_started_at is None:
        return "the location's last observation was not complete"
    if location.observation_started_at < end:
        return "no observation of the location began after the hour ended yet"
    if unlisted:
        return "a cluster cloudspace of the location could not be listed"
    return ""


@dataclass(frozen=True)
class LocationRecords:
    """What the checks of a location's hours from `since` on read of our own rows, read
    once for all of them (a handful of queries per location, whatever the hours, machines
    or rows), each hour then taken from it (`hour`)."""

    location: Location
    machine_vms: set[str]  # the VMs our machines hold now
    removed_vms: list[tuple[datetime, str]]  # (when, VM id) removed by us since
    held_vgpus: set[str]  # the vGPUs our machines hold now
    named: list[tuple[str, str, bool, datetime | None]]  # (id, name, billed, released at)
    leaks: list[Leak]  # the ledger's leaks named by us in [since, until)
    listed_names: dict[str, str]  # the listing's vGPU names, by id

    @classmethod
    def read(cls, location: Location, since: datetime, until: datetime) -> LocationRecords:
        machine_vms = {
            str(vm_id)
            for vm_id in Machine.objects.filter(
                pool__site__location=location, vm_id__isnull=False
            ).values_list("vm_id", flat=True)
        }
        removed_vms = []
        removals = AuditEvent.objects.filter(
            account_id=location.account_id, action__in=VM_REMOVALS, created_at__gte=since
        ).values_list("created_at", "before")
        for created_at, before in removals:
            if not before or before.get("vm_id") is None:
                continue
            # machine.recreate's and machine.force_delete's records name no location: their
            # VM is taken as this one's.
            if before.get("location_id", location.pk) == location.pk:
                removed_vms.append((created_at, str(before["vm_id"])))
        ours = VgpuReservation.objects.filter(location=location, vgpu_id__isnull=False)
        held_vgpus = {
            str(vgpu_id)
            for vgpu_id in ours.filter(machine__isnull=False).values_list("vgpu_id", flat=True)
        }
        released_since = Q(state=VgpuReservation.State.RELEASED, released_at__gte=since)
        named = [
            (str(vgpu_id), name, state in BILLED_STATES, released_at)
            for vgpu_id, name, state, released_at in ours.filter(
                Q(state__in=BILLED_STATES) | released_since
            ).values_list("vgpu_id", "name", "state", "released_at")
        ]
        # A leak is ours: named by us. The mirror flags every vGPU no machine owns, also
        # those named otherwise, which nothing of ours made: those are unexplained.
        leaks = [
            leak for leak in leaks_during(location, since, until) if leak.name.startswith(PREFIX)
        ]
        listed_names = dict(
            ListedVgpu.objects.filter(location=location).values_list("vgpu_id", "name")
        )
        return cls(location, machine_vms, removed_vms, held_vgpus, named, leaks, listed_names)

    def hour(self, start: datetime, end: datetime) -> HourOwnership:
        """What we owned in [start, end): the machines' VMs and those removed since the
        hour began; the machines' vGPUs and ours (named by us) released since; the leaks
        of the hour."""
        vms = self.machine_vms | {vm_id for at, vm_id in self.removed_vms if at >= start}

        def released_since(released_at: datetime | None) -> bool:
            return released_at is not None and released_at >= start

        vgpus = self.held_vgpus | {
            vgpu_id
            for vgpu_id, name, billed, released_at in self.named
            if not billed and released_since(released_at) and name.startswith(PREFIX)
        }
        names = {
            vgpu_id: name
            for vgpu_id, name, billed, released_at in self.named
            if billed or released_since(released_at)
        }
        leaks = [
            leak
            for leak in self.leaks
            if leak.leaked_since < end and (leak.ended_at is None or leak.ended_at > start)
        ]
        return HourOwnership(vms, vgpus, leaks, names)


@dataclass(frozen=True)
class HourOwnership:
    """What we owned at a location during one hour, and what the ledger's leaks cost of
    each billed object in it (Leak.cost: the same figure the ledger shows for the hour)."""

    vms: set[str]
    vgpus: set[str]
    leaks: list[Leak]
    names: dict[str, str]  # our vGPUs' names, by vGPU id, released ones too

    def split(
        self, items: list[BilledObject], start: datetime, end: datetime
    ) -> list[tuple[BilledObject, Decimal]]:
        """Each billed object with its leaked part: the hour's cost of the leaks it bills
        (a vGPU's on its own line first, the rest under the VM it is on), at most what it
        was billed."""
        left = {(item.kind, item.external_id): item.cost for item in items}
        leaked = dict.fromkeys(left, Decimal(0))

        def take(key: tuple[str, str], cost: Decimal) -> Decimal:
            part = min(cost, left.get(key, Decimal(0)))
            if part > 0:
                left[key] -= part
                leaked[key] += part
            return cost - part

        on_vm = self._vgpu_vms()
        leaked_vms = [
            (BillItem.Kind.VM, leak.external_id) for leak in self.leaks if leak.kind == Leak.Kind.VM
        ]
        for leak in sorted(self.leaks, key=lambda leak: leak.kind != Leak.Kind.VM):
            cost = leak.cost(since=start, until=end).quantize(MICRO)
            if leak.kind == Leak.Kind.VM:
                take((BillItem.Kind.VM, leak.external_id), cost)
                continue
            rest = take((BillItem.Kind.VGPU, leak.external_id), cost)
            # Billed under the VM it was on: known while attached; once we removed that VM
            # (its reservation detached), one of the leaked VMs.
            vm_id = on_vm.get(leak.external_id)
            for key in [(BillItem.Kind.VM, vm_id)] if vm_id else leaked_vms:
                rest = take(key, rest) if rest else rest
        return [(item, leaked[item.kind, item.external_id]) for item in items]

    def _vgpu_vms(self) -> dict[str, str]:
        """The VM each leaked vGPU was last on (billed under that VM while attached)."""
        ids = [leak.external_id for leak in self.leaks if leak.kind == Leak.Kind.VGPU]
        if not ids:
            return {}
        return {
            str(vgpu_id): str(vm_id)
            for vgpu_id, vm_id in VgpuReservation.objects.filter(
                vgpu_id__in=ids, vm_id__isnull=False
            ).values_list("vgpu_id", "vm_id")
        }

    def owned(self, item: BilledObject) -> bool:
        return item.external_id in (self.vms if item.kind == BillItem.Kind.VM else self.vgpus)


def location_bill_check(
    *,
    client: ws.WhiteskyClient,
    location: Location,
    start: datetime,
    end: datetime,
    now: datetime,
) -> BillCheckResult:
    """Check one finished hour [start, end) of a location's bill; write it once."""
    if BillCheck.objects.filter(location=location, start=start).exists():
        return BillCheckResult(location=location.name, start=start)
    unlisted = bool(locations_unlisted([location]))
    if waiting := hour_waiting(location, end, now, unlisted=unlisted):
        return BillCheckResult(location=location.name, start=start, waiting=waiting)
    records = LocationRecords.read(location, start, end)
    return hour_check(client=client, records=records, start=start, end=end, now=now)


def hour_waiting(location: Location, end: datetime, now: datetime, *, unlisted: bool) -> str:
    """Why an hour ending at `end` cannot be decided yet ("" if it can)."""
    if end > now:
        return "the hour has not ended"
    return picture_incomplete(location, end, unlisted=unlisted)


def hour_check(
    *,
    client: ws.WhiteskyClient,
    records: LocationRecords,
    start: datetime,
    end: datetime,
    now: datetime,
) -> BillCheckResult:
    """Check an hour of the location that can be decided and is not checked yet, with its
    records (read for a span that holds the hour); write it once."""
    location = records.location
    result = BillCheckResult(location=location.name, start=start)
    try:
        consumption = client.location_consumption(location=location.name, start=start, end=end)
    except ws.WhiteskyError as exc:
        result.error = exc
        return result
    ours = records.hour(start, end)
    for item, leaked in ours.split(billed_objects(location, consumption), start, end):
        result.billed += item.cost
        if item.kind == BillItem.Kind.VGPU and not item.name:
            name = ours.names.get(item.external_id) or records.listed_names.get(
                item.external_id, ""
            )
            item = replace(item, name=name)
        if leaked:
            result.leaked += leaked
            result.items.append((Verdict.LEAK, replace(item, cost=leaked)))
        rest = item.cost - leaked
        if not rest:
            continue
        # The rest of a leak's line is a machine's time, or the moments before it was
        # flagged: what no leak and no machine explains is told.
        if ours.owned(item) or leaked:
            result.owned += rest
        else:
            result.unexplained += rest
            result.items.append((Verdict.UNEXPLAINED, replace(item, cost=rest)))
    check = BillCheck(
        location=location,
        start=start,
        end=end,
        checked_at=now,
        currency=location.currency,
        billed=result.billed,
        owned=result.owned,
        leaked=result.leaked,
        unexplained=result.unexplained,
    )
    try:
        with transaction.atomic():
            check.save()
            BillItem.objects.bulk_create(
                BillItem(
                    bill=check,
                    kind=item.kind,
                    external_id=item.external_id,
                    name=item.name[:200],
                    cloudspace_id=item.cloudspace_id,
                    verdict=verdict,
                    units=counted_units(item.units),
                    cost=item.cost,
                )
                for verdict, item in result.items
            )
    except IntegrityError:
        return BillCheckResult(location=location.name, start=start)  # another pass wrote it
    result.written = True
    return result


def hours_due(locations: list[Location], now: datetime) -> dict[int, list[datetime]]:
    """Each location's last BILL_CHECK_HOURS_BACK finished hours not checked yet, oldest
    first, in one query."""
    first = hour_of(now) - settings.BILL_CHECK_HOURS_BACK * HOUR
    hours = [first + n * HOUR for n in range(settings.BILL_CHECK_HOURS_BACK)]
    checked = set(
        BillCheck.objects.filter(location__in=locations, start__gte=first).values_list(
            "location_id", "start"
        )
    )
    return {
        location.pk: [hour for hour in hours if (location.pk, hour) not in checked]
        for location in locations
    }


def account_bills_check(
    *, client: ws.WhiteskyClient, account: Account, now: datetime
) -> list[BillCheckResult]:
    """Check each location's due hours, oldest first, with at most
    BILL_CHECK_CALLS_PER_PASS consumption calls. A location stops at its first hour that
    cannot be decided (an incomplete picture, a failed call): the next pass goes on.

    Our own rows are read once per account (what is due, what is unlisted) and once per
    location with an hour to check (its records, for all its due hours): a pass with
    nothing due makes two queries, whatever the locations, machines or hours."""
    results: list[BillCheckResult] = []
    calls = settings.BILL_CHECK_CALLS_PER_PASS
    locations = list(account.locations.order_by("name"))
    due = hours_due(locations, now)
    if not any(due.values()):
        return results
    unlisted = locations_unlisted(locations)
    for location in locations:
        hours = due[location.pk]
        if not hours:
            continue
        if waiting := hour_waiting(
            location, hours[0] + HOUR, now, unlisted=location.pk in unlisted
        ):
            results.append(BillCheckResult(location.name, hours[0], waiting=waiting))
            continue
        records = LocationRecords.read(location, hours[0], hours[-1] + HOUR)
        for start in hours:
            end = start + HOUR
            if calls <= 0:
                return results
            if waiting := hour_waiting(location, end, now, unlisted=location.pk in unlisted):
                results.append(BillCheckResult(location.name, start, waiting=waiting))
                break
            calls -= 1  # the consumption is asked for
            result = hour_check(client=client, records=records, start=start, end=end, now=now)
            results.append(result)
            if result.error:
                break
    return results
