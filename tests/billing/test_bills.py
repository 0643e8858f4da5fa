"""The check of whitesky's bill (billing.bills) against the simulator over real HTTP: what
a location billed in a finished hour, split into what our machines own, known leaks, and
"billed, not explained", with the objects behind it.

The control plane lives on the simulator's clock here (Django's `timezone.now` follows it),
so an hour can end without waiting for one: the simulator bills on its own clock, and an
observation begun after the hour is stamped on the same one.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import tasks
from billing.bills import account_bills_check, location_bill_check
from billing.leaks import leaks_record
from billing.models import BillCheck, BillItem
from billing.selectors import bill_checks_latest
from cloud.models import Location
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, Machine
from gpus.models import VgpuReservation
from tests.billing.conftest import SimClock
from tests.gpus.conftest import CLOUDSPACES, NL, Plane
from tests.gpus.support import orphan_made
from tests.whitesky_sim import WhiteskySimulator

D = Decimal
HOUR = timedelta(hours=1)
MONTH_HOURS = D(730)
# The demo world's monthly prices in nl-rmd-dc01-001 (EUR): a vCPU, a GiB, a vGPU.
NL_PRICES = {"vcu": D(12), "mu": D(4), "vgu": D(300)}


def _hour_begins(clock: SimClock) -> datetime:
    """Move to one minute into the next whole hour; answers that hour's start."""
    hour = clock.now().replace(minute=0, second=0, microsecond=0) + HOUR
    clock.to(hour + timedelta(minutes=1))
    return hour


def _hour_ended(plane: Plane, clock: SimClock, hour: datetime) -> None:
    """Five minutes after the hour: an observation begins (and completes) then."""
    clock.to(hour + HOUR + timedelta(minutes=5))
    plane.observe()


def _check(plane: Plane, hour: datetime, clock: SimClock) -> Any:
    with whitesky_client(plane.account) as client:
        return location_bill_check(
            client=client,
            location=plane.location(NL),
            start=hour,
            end=hour + HOUR,
            now=clock.now(),
        )


def _gpu_cluster(plane: Plane) -> Cluster:
    cluster = plane.cluster(sites=(NL,))
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, vcpus=4, memory_mib=8192)
    plane.converge(cluster)
    return cluster


def _behind_our_back(plane: Plane) -> tuple[str, str]:
    """A VM in the cluster's cloudspace and an unassigned vGPU, made in the simulator
    directly, not through the control plane."""
    made = plane.sim.seed(CLOUDSPACES[NL], vms=1, vgpus=1, prefix="shadow")
    return str(made["vm_ids"][0]), made["vgpu_ids"][0]


def _overlap(begin: float, until: float | None, hour: datetime, now: float) -> D:
    start, end = hour.timestamp(), (hour + HOUR).timestamp()
    seconds = max(0.0, min(until if until is not None else now, end) - max(begin, start))
    return D(str(seconds)) / D(3600)


def _expected_costs(sim: WhiteskySimulator, hour: datetime) -> dict[tuple[str, str], D]:
    """What each VM and unassigned vGPU cost in the hour at the demo prices, by the
    simulator's billing rules (docs/known-limitations.md), from its own state: a VM's
    vCPUs and GiB from creation to permanent deletion, and each vGPU stretch under the VM
    it was on, or unassigned."""
    state = sim.state()
    now = state["now"]
    costs: dict[tuple[str, str], D] = {}
    for vm in state["vms"]:
        if vm["cloudspace_id"] != CLOUDSPACES[NL]:
            continue
        hours = _overlap(vm["creation_time"], vm["destroyed_time"], hour, now)
        monthly = vm["vcpus"] * NL_PRICES["vcu"] + D(vm["memory"]) / 1024 * NL_PRICES["mu"]
        if hours:
            costs["vm", str(vm["vm_id"])] = hours * monthly / MONTH_HOURS
    for vgpu in state["vgpus"]:
        if vgpu["location"] != NL:
            continue
        for segment in vgpu["segments"]:
            hours = _overlap(segment["start"], segment["end"], hour, now)
            if not hours:
                continue
            key = ("vm", str(segment["vm_id"])) if segment["vm_id"] else ("vgpu", vgpu["vgpu_id"])
            costs[key] = costs.get(key, D(0)) + hours * NL_PRICES["vgu"] / MONTH_HOURS
    return costs


def _cents(amount: D) -> D:
    return amount.quantize(D("0.01"))


def test_a_vm_and_a_vgpu_made_behind_our_back_are_billed_not_explained(
    plane: Plane, clock: SimClock
) -> None:
    hour = _hour_begins(clock)
    _gpu_cluster(plane)
    shadow_vm, shadow_vgpu = _behind_our_back(plane)
    _hour_ended(plane, clock, hour)

    result = _check(plane, hour, clock)

    assert result.written and result.error is None
    check = BillCheck.objects.get()
    items = {(i.kind, i.external_id): i for i in check.items.all()}
    assert set(items) == {("vm", shadow_vm), ("vgpu", shadow_vgpu)}
    assert {i.verdict for i in items.values()} == {BillItem.Verdict.UNEXPLAINED}
    assert (items["vm", shadow_vm].name, items["vm", shadow_vm].cloudspace_id) == (
        "shadow-vm-0",
        CLOUDSPACES[NL],
    )
    assert items["vgpu", shadow_vgpu].name == "shadow-vgpu-0"
    # Each object's cost is the simulator's own billing rule at the location's prices.
    expected = _expected_costs(plane.sim, hour)
    for key, item in items.items():
        assert _cents(item.cost) == _cents(expected[key])
    assert check.unexplained == sum(i.cost for i in items.values())
    # What our machine's VM and vGPU cost is explained, all of it, to the cent.
    machine = Machine.objects.get()
    ours = expected["vm", str(machine.vm_id)]
    for vgpu_id in VgpuReservation.objects.filter(machine=machine).values_list(
        "vgpu_id", flat=True
    ):
        ours += expected.get(("vgpu", vgpu_id), D(0))  # the moment it was not attached yet
    assert _cents(check.owned) == _cents(ours) > 0
    assert check.owned == check.billed - check.leaked - check.unexplained
    assert (check.leaked, check.currency, check.end) == (D(0), "EUR", hour + HOUR)


def test_a_machine_torn_down_within_the_hour_still_explains_its_vm(
    plane: Plane, clock: SimClock
) -> None:
    hour = _hour_begins(clock)
    cluster = _gpu_cluster(plane)
    vm_id = Machine.objects.get().vm_id
    clock.to(hour + timedelta(minutes=31))
    cluster.pools.update(replicas=0)
    plane.converge(cluster)
    assert not Machine.objects.exists()
    _hour_ended(plane, clock, hour)

    _check(plane, hour, clock)

    check = BillCheck.objects.get()
    assert _cents(check.owned) == _cents(_expected_costs(plane.sim, hour)["vm", str(vm_id)]) > 0
    assert (check.unexplained, check.leaked, check.items.count()) == (D(0), D(0), 0)


def test_a_known_orphan_is_billed_as_a_leak_not_as_unexplained(
    plane: Plane, clock: SimClock
) -> None:
    hour = _hour_begins(clock)
    orphan = orphan_made(plane)  # a GPU machine deleted with force: its VM and vGPU stay
    leaks_record()
    _hour_ended(plane, clock, hour)

    _check(plane, hour, clock)

    check = BillCheck.objects.get()
    items = {(i.kind, i.external_id): i for i in check.items.all()}
    # Its vGPU is on its VM, so billed under the VM (and, for the moment before it was
    # attached, on its own): all of it a leak, none of it unexplained.
    assert orphan.vm_id is not None
    assert items["vm", str(orphan.vm_id)].name == "capvco-demo-a100-0"
    assert set(items) <= {("vm", str(orphan.vm_id)), ("vgpu", orphan.vgpu_id)}
    assert {i.verdict for i in items.values()} == {BillItem.Verdict.LEAK}
    assert (check.unexplained, check.leaked) == (D(0), sum(i.cost for i in items.values()))
    assert check.billed == check.owned + check.leaked


def test_an_observation_begun_before_the_hour_ended_or_partial_decides_nothing(
    plane: Plane, clock: SimClock
) -> None:
    hour = _hour_begins(clock)
    _behind_our_back(plane)
    plane.observe()  # within the hour
    clock.to(hour + HOUR + timedelta(minutes=5))
    plane.sim.clear_calls()

    early = _check(plane, hour, clock)
    plane.sim.fault(operation="listCustomerVGPUS", status=503)
    plane.observe()  # after the hour, but the vGPU listing failed
    partial = _check(plane, hour, clock)

    assert early.waiting == "no observation of the location began after the hour ended yet"
    assert partial.waiting == "the location's last observation was not complete"
    assert not BillCheck.objects.exists()
    asked = [c for c in plane.sim.calls()["calls"] if c["operation"] == "getCustomerConsumption"]
    assert asked == []  # nothing was even asked

    plane.sim.clear_faults()
    plane.observe()
    assert _check(plane, hour, clock).written
    assert BillCheck.objects.get().unexplained > 0


def test_a_second_pass_writes_nothing_and_asks_nothing(plane: Plane, clock: SimClock) -> None:
    hour = _hour_begins(clock)
    _gpu_cluster(plane)
    _behind_our_back(plane)
    _hour_ended(plane, clock, hour)
    with whitesky_client(plane.account) as client:
        first = account_bills_check(client=client, account=plane.account, now=clock.now())
    plane.sim.clear_calls()

    with (
        CaptureQueriesContext(connection) as queries,
        whitesky_client(plane.account) as client,
    ):
        second = account_bills_check(client=client, account=plane.account, now=clock.now())

    # Both locations' last six hours were checked once, oldest first.
    assert [(r.location, r.start) for r in first if r.written][-1] == (NL, hour)
    assert BillCheck.objects.count() == 12
    assert second == []
    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert writes == []
    assert plane.sim.calls()["calls"] == []


def _selects(queries: CaptureQueriesContext) -> int:
    return sum(q["sql"].lstrip().upper().startswith("SELECT") for q in queries)


def test_a_pass_reads_per_location_not_per_hour_and_writes_only_the_hours_new_since(
    plane: Plane, clock: SimClock
) -> None:
    hour = _hour_begins(clock)
    _gpu_cluster(plane)
    _behind_our_back(plane)
    _hour_ended(plane, clock, hour)
    with CaptureQueriesContext(connection) as six_hours, whitesky_client(plane.account) as client:
        account_bills_check(client=client, account=plane.account, now=clock.now())
    before = {
        "checks": list(BillCheck.objects.order_by("pk").values()),
        "items": list(BillItem.objects.order_by("pk").values()),
    }

    # Nothing changed but the clock: the next hour ended, and was observed after.
    _hour_ended(plane, clock, hour + HOUR)
    with CaptureQueriesContext(connection) as one_hour, whitesky_client(plane.account) as client:
        results = account_bills_check(client=client, account=plane.account, now=clock.now())

    # Each location's new hour, written once: the rows of the earlier hours as they were.
    assert [(r.location, r.start, r.written) for r in results] == [
        ("be-mac-dc01-001", hour + HOUR, True),
        (NL, hour + HOUR, True),
    ]
    assert (
        list(BillCheck.objects.filter(start__lte=hour).order_by("pk").values()) == before["checks"]
    )
    assert (
        list(BillItem.objects.filter(bill__start__lte=hour).order_by("pk").values())
        == before["items"]
    )
    assert BillCheck.objects.count() == len(before["checks"]) + 2
    new_items = BillItem.objects.filter(bill__start=hour + HOUR)
    assert new_items.count() == BillItem.objects.filter(bill__start=hour).count() > 0
    # Our rows were read once per location, however many hours each pass checked (6, 1).
    assert _selects(six_hours) == _selects(one_hour)


def test_a_retryable_failure_mid_pass_leaves_the_hour_for_the_next_pass(
    plane: Plane, clock: SimClock, settings: Any
) -> None:
    settings.BILL_CHECK_HOURS_BACK = 2
    hour = _hour_begins(clock)
    shadow_vm, _ = _behind_our_back(plane)
    _hour_ended(plane, clock, hour)
    # The first hour's consumption answers; every call after it fails (503, retried by
    # the client first).
    plane.sim.fault(operation="getCustomerConsumption", status=503, skip=1)

    tasks.bill_check_account.apply((plane.account.pk,))

    checked = list(BillCheck.objects.values_list("location__name", "start"))
    assert checked == [("be-mac-dc01-001", hour - HOUR)]

    plane.sim.clear_faults()
    tasks.bill_check_account.apply((plane.account.pk,))

    assert BillCheck.objects.count() == 4
    latest = bill_checks_latest(Location.objects.filter(account=plane.account))
    nl = latest[plane.location(NL).pk]
    assert (nl.start, [i.external_id for i in nl.items.all() if i.kind == "vm"]) == (
        hour,
        [shadow_vm],
    )
    told = BillItem.objects.filter(
        verdict=BillItem.Verdict.UNEXPLAINED,
        bill__start__gte=hour - HOUR,
        bill__start__lt=hour + HOUR,
    )
    assert {i.bill.location.name for i in told} == {NL}


def test_an_hours_check_takes_the_same_queries_for_one_billed_object_or_a_hundred(
    plane: Plane, clock: SimClock
) -> None:
    hour = _hour_begins(clock)
    plane.sim.seed(CLOUDSPACES[NL], vms=1, prefix="one")
    plane.sim.seed(CLOUDSPACES["be-mac-dc01-001"], vms=100, prefix="many")
    _hour_ended(plane, clock, hour)
    counted = []
    for location in (NL, "be-mac-dc01-001"):
        with (
            CaptureQueriesContext(connection) as queries,
            whitesky_client(plane.account) as client,
        ):
            result = location_bill_check(
                client=client,
                location=plane.location(location),
                start=hour,
                end=hour + HOUR,
                now=clock.now(),
            )
        counted.append((len(result.items), len(queries)))

    assert [items for items, _ in counted] == [1, 100]
    assert counted[0][1] == counted[1][1]


def test_beat_sends_the_bill_check_for_each_account(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["bill-check"]
    assert (entry["task"], entry["schedule"]) == (
        "billing.tasks.bill_check_all",
        settings.BILL_CHECK_INTERVAL,
    )
