"""The leak ledger (billing.leaks): a row opened per orphan as observe flags it, ended
when it is released, gone from a complete listing or owned again, and what it cost kept
on the record. The flags are observe's, taken from complete listings; the ledger only
follows them, and ends a leak whose object is gone only after a complete observation of
its location that began after the leak was flagged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.leaks import leaks_record
from billing.models import Leak
from billing.selectors import leak_totals
from cloud.models import Location, VirtualMachine
from gpus.models import ListedVgpu, VgpuReservation
from tests.factories import LocationFactory, VgpuReservationFactory, VirtualMachineFactory

pytestmark = pytest.mark.django_db

D = Decimal
FLAGGED = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def location() -> Location:
    # 730 a month: a vGPU costs 1 an hour; a vCPU 0.01 and a GiB 0.005 an hour.
    return LocationFactory(  # type: ignore[no-any-return]
        currency="EUR", vgu_price=D("730"), prices={"vcu": 7.30, "mu": 3.65, "vgu": 730},
        observation_complete=True, observation_started_at=FLAGGED,
        last_complete_observation_at=FLAGGED,
    )  # fmt: skip


def _orphan_vgpu(location: Location) -> VgpuReservation:
    return VgpuReservationFactory(  # type: ignore[no-any-return]
        orphaned=True, location=location, name="capvco-prod-gone-gpu-0", vgpu_id="v-1",
        orphaned_since=FLAGGED,
    )  # fmt: skip


def _orphan_vm(location: Location) -> VirtualMachine:
    return VirtualMachineFactory(  # type: ignore[no-any-return]
        location=location, vm_id=900, name="capvco-prod-gone", vcpus=2, memory_mib=2048,
        orphaned_since=FLAGGED, orphan_confirmations=1,
    )  # fmt: skip


def test_each_orphan_opens_one_leak_and_a_second_pass_writes_nothing(location: Location) -> None:
    _orphan_vgpu(location)
    _orphan_vm(location)

    first = leaks_record()
    with CaptureQueriesContext(connection) as queries:
        second = leaks_record()

    assert (first.opened, second.opened, second.ended) == (2, 0, 0)
    writes = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith(("INSERT", "UPDATE"))
    ]
    assert writes == []
    leaks = {leak.kind: leak for leak in Leak.objects.all()}
    assert (leaks["vgpu"].external_id, leaks["vgpu"].monthly_price) == ("v-1", D("730"))
    # The VM: 2 vCPUs * 7.30 + 2 GiB * 3.65 = 21.90 a month.
    assert (leaks["vm"].external_id, leaks["vm"].monthly_price) == ("900", D("21.90"))
    assert leaks["vm"].leaked_since == FLAGGED


def test_a_released_leak_keeps_what_it_cost_from_flagged_to_released(location: Location) -> None:
    vgpu = _orphan_vgpu(location)
    leaks_record()
    released = FLAGGED + timedelta(hours=41, minutes=12)
    VgpuReservation.objects.filter(pk=vgpu.pk).update(
        state=VgpuReservation.State.RELEASED, released_at=released
    )

    ended = leaks_record()

    leak = Leak.objects.get()
    assert (ended.ended, leak.end, leak.ended_at) == (1, Leak.End.RELEASED, released)
    # 41.2 hours at 1 an hour, also long after.
    assert leak.cost() == D("41.2")
    assert leak_totals(
        leaks=Leak.objects.all(), since=datetime(2026, 12, 1, tzinfo=UTC),
        until=datetime(2027, 1, 1, tzinfo=UTC),
    )[0].cost == D("41.20")  # fmt: skip


def test_a_leak_gone_from_a_partial_listing_stays_open_until_a_complete_one(
    location: Location,
) -> None:
    _orphan_vm(location)
    leaks_record()
    VirtualMachine.objects.filter(vm_id=900).delete()  # not listed any more
    seen = FLAGGED + timedelta(hours=3)
    Location.objects.filter(pk=location.pk).update(
        observation_complete=False, observation_started_at=seen
    )

    partial = leaks_record()
    Location.objects.filter(pk=location.pk).update(
        observation_complete=True, last_complete_observation_at=seen
    )
    complete = leaks_record()

    assert partial.ended == 0
    leak = Leak.objects.get()
    assert (complete.ended, leak.end, leak.ended_at) == (1, Leak.End.GONE, seen)
    # 3 hours of 2 vCPUs and 2 GiB: 3 * (0.02 + 0.01) = 0.09.
    assert leak.cost() == D("0.09")


def test_an_orphan_owned_again_ends_its_leak_and_a_new_flag_opens_another(
    location: Location,
) -> None:
    vgpu = _orphan_vgpu(location)
    leaks_record()
    ListedVgpu.objects.filter(vgpu_id=vgpu.vgpu_id).update(orphaned_since=None)
    leaks_record()
    ListedVgpu.objects.filter(vgpu_id=vgpu.vgpu_id).update(orphaned_since=FLAGGED + timedelta(1))

    again = leaks_record()

    assert again.opened == 1
    assert [(leak.end, leak.ended_at is None) for leak in Leak.objects.order_by("pk")] == [
        (Leak.End.OWNED, False),
        ("", True),
    ]


def test_leak_totals_say_this_months_cost_and_how_many_are_still_open(location: Location) -> None:
    month = datetime(2026, 12, 1, tzinfo=UTC)
    common = {"account": location.account, "location": location, "currency": "EUR",
              "monthly_price": D("730"), "kind": Leak.Kind.VGPU}  # fmt: skip
    # Leaked since November, released 10 hours into December: 10 of this month.
    Leak.objects.create(**common, external_id="a", billed_since=month - timedelta(days=3),
                        leaked_since=month - timedelta(days=2),
                        ended_at=month + timedelta(hours=10), end=Leak.End.RELEASED)  # fmt: skip
    # Open since 5 hours before `until`, when its location was last observed whole.
    until = month + timedelta(days=1)
    Location.objects.filter(pk=location.pk).update(last_complete_observation_at=until)
    Leak.objects.create(**common, external_id="b", billed_since=until - timedelta(hours=5),
                        leaked_since=until - timedelta(hours=5))  # fmt: skip

    totals = leak_totals(leaks=Leak.objects.all(), since=month, until=until)

    assert [(t.currency, t.cost, t.open, t.ended) for t in totals] == [("EUR", D("15.00"), 1, 1)]


def test_an_orphan_whose_leak_cannot_be_written_keeps_out_only_itself(
    location: Location, caplog: pytest.LogCaptureFixture
) -> None:
    _orphan_vgpu(location)
    # A listing's absurd size: its monthly price overflows the ledger's column.
    VirtualMachineFactory(
        location=location, vm_id=901, name="capvco-prod-huge", vcpus=2_000_000_000,
        memory_mib=2048, orphaned_since=FLAGGED, orphan_confirmations=1,
    )  # fmt: skip

    recorded = leaks_record()

    assert recorded.opened == 1
    assert list(Leak.objects.values_list("kind", "external_id")) == [("vgpu", "v-1")]
    [failure] = recorded.failures
    assert failure.startswith(f"new leak (vm 901, {location.name}): ")
    assert any(r.levelname == "ERROR" and "vm 901" in r.getMessage() for r in caplog.records)
