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


def picture_incomplete(location: Location, end: datetime) -> str:
    """Why the location's mirror cannot yet say what we owned until `end` ("" if it can)."""
    if not location.observation_complete or location.observation_started_at is None:
        return "the location's last observation was not complete"
    if location.observation_started_at < end:
        return "no observation of the location began after the hour ended yet"
    unlisted = ClusterSite.objects.filter(location=location).exclude(observation_error="")
    if unlisted.exists():
        return "a cluster cloudspace of the location could not be listed"
    return ""


@dataclass(frozen=True)
class HourOwnership:
    """What we owned at a location during one hour, and what the ledger's leaks cost of
    each billed object in it (Leak.cost: the same figure the ledger shows for the hour)."""

    vms: set[str]
    vgpus: set[str]
    leaks: list[Leak]
    names: dict[str, str]  # our vGPUs' names, by vGPU id, released ones too

    @classmethod
    def during(cls, location: Location, start: datetime, end: datetime) -> HourOwnership:
        vms = {
            str(vm_id)
            for vm_id in Machine.objects.filter(
                pool__site__location=location, vm_id__isnull=False
            ).values_list("vm_id", flat=True)
        }
        removals = AuditEvent.objects.filter(
            account_id=location.account_id, action__in=VM_REMOVALS, created_at__gte=start
        ).values_list("before", flat=True)
        for before in removals:
            if not before or before.get("vm_id") is None:
                continue
            # machine.recreate's and machine.force_delete's records name no location: their
            # VM is taken as this one's.
            if before.get("location_id", location.pk) == location.pk:
                vms.add(str(before["vm_id"]))
        # A leak is ours: named by us. The mirror flags every vGPU no machine owns, also
        # those named otherwise, which nothing of ours made: those are unexplained.
        ours_by_name = Q(name__startswith=PREFIX)
        released_since = Q(state=VgpuReservation.State.RELEASED, released_at__gte=start)
        ours = VgpuReservation.objects.filter(location=location, vgpu_id__isnull=False)
        vgpus = {
            str(vgpu_id)
            for vgpu_id in ours.filter(
                Q(machine__isnull=False) | (released_since & ours_by_name)
            ).values_list("vgpu_id", flat=True)
        }
        leaks = [
            leak for leak in leaks_during(location, start, end) if leak.name.startswith(PREFIX)
        ]
        names = {
            str(vgpu_id): name
            for vgpu_id, name in ours.filter(
                Q(state__in=BILLED_STATES) | released_since
            ).values_list("vgpu_id", "name")
        }
        return cls(vms, vgpus, leaks, names)

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
    result = BillCheckResult(location=location.name, start=start)
    if BillCheck.objects.filter(location=location, start=start).exists():
        return result
    if end > now:
        result.waiting = "the hour has not ended"
        return result
    if refusal := picture_incomplete(location, end):
        result.waiting = refusal
        return result
    try:
        consumption = client.location_consumption(location=location.name, start=start, end=end)
    except ws.WhiteskyError as exc:
        result.error = exc
        return result
    ours = HourOwnership.during(location, start, end)
    listed_names = dict(ListedVgpu.objects.filter(location=location).values_list("vgpu_id", "name"))
    for item, leaked in ours.split(billed_objects(location, consumption), start, end):
        result.billed += item.cost
        if item.kind == BillItem.Kind.VGPU and not item.name:
            name = ours.names.get(item.external_id) or listed_names.get(item.external_id, "")
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


def hours_due(location: Location, now: datetime) -> list[datetime]:
    """The last BILL_CHECK_HOURS_BACK finished hours of the location not checked yet,
    oldest first."""
    first = hour_of(now) - settings.BILL_CHECK_HOURS_BACK * HOUR
    hours = [first + n * HOUR for n in range(settings.BILL_CHECK_HOURS_BACK)]
    checked = set(
        BillCheck.objects.filter(location=location, start__gte=first).values_list(
            "start", flat=True
        )
    )
    return [hour for hour in hours if hour not in checked]


def account_bills_check(
    *, client: ws.WhiteskyClient, account: Account, now: datetime
) -> list[BillCheckResult]:
    """Check each location's due hours, oldest first, with at most
    BILL_CHECK_CALLS_PER_PASS consumption calls. A location stops at its first hour that
    cannot be decided (an incomplete picture, a failed call): the next pass goes on."""
    results: list[BillCheckResult] = []
    calls = settings.BILL_CHECK_CALLS_PER_PASS
    for location in account.locations.order_by("name"):
        for start in hours_due(location, now):
            if calls <= 0:
                return results
            result = location_bill_check(
                client=client, location=location, start=start, end=start + HOUR, now=now
            )
            if not result.waiting:
                calls -= 1  # the consumption was asked for
            results.append(result)
            if result.waiting or result.error:
                break
    return results
