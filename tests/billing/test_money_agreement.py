"""Money is one number: what leaks cost, as the bill check, the leak ledger (page, API,
CSV), the overview and /metrics say it, over one scripted stretch of a month on the
simulator (a machine deleted with force inside an hour, its leaks reclaimed inside the
next, a VM made behind our back), equal to the cent; and a leak's cost so far never goes
down."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils.timezone import now
from rest_framework.test import APIClient

from billing.leaks import leaks_record
from billing.models import BillCheck, BillItem, Leak
from billing.rollups import month_of
from billing.selectors import leak_totals
from capvco_web.audit import SystemActor
from cloud.models import VirtualMachine
from cloud.whitesky import whitesky_client
from clusters.models import Machine
from clusters.reconcile import vm_remove
from clusters.releases import orphan_vm_remove
from clusters.services import cluster_delete, machine_force_delete
from tests.billing.conftest import SimClock
from tests.billing.test_bills import _behind_our_back, _check, _gpu_cluster, _hour_begins
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import auto_release_set, sweep
from tests.gpus.test_metrics import scraped, value

D = Decimal
HOUR = timedelta(hours=1)
CENT = D("0.01")
MINUTE = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def metrics_allowed(settings: Any) -> None:
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]  # the test client's address


@pytest.fixture
def ops(django_user_model: type[User]) -> User:
    return django_user_model.objects.create_superuser("ops", password="x")


def _force_deleted(plane: Plane) -> Machine:
    machine = Machine.objects.get()
    machine_force_delete(machine=machine, actor=SystemActor.RECONCILER, reason="stuck")
    plane.observe()  # flags its VM and its vGPU orphaned
    leaks_record()
    return machine


def _month_figures(plane: Plane, ops: User) -> dict[str, D]:
    """What leaks cost this month, as each place that shows it says it."""
    account = str(plane.account.pk)
    browser = Client()
    browser.force_login(ops)
    api = APIClient()
    api.force_login(ops)
    figures: dict[str, D] = {}
    for page in ("leaks", "overview"):
        text = browser.get(reverse(f"dashboard:{page}")).content.decode()
        found = re.search(r"Leaks cost ([\d.]+) EUR this month", text)
        assert found, page
        figures[f"{page} page"] = D(found[1])
    summary = api.get("/api/v1/leaks/summary/").json()["totals"]
    figures["API summary"] = sum((D(t["cost"]) for t in summary if t["currency"] == "EUR"), D(0))
    rows = api.get("/api/v1/leaks/").json()["results"]
    figures["API rows"] = sum((D(row["cost"]) for row in rows), D(0)).quantize(CENT)
    ledger_csv = api.get("/api/v1/leaks/", {"format": "csv"}).content.decode()
    figures["ledger CSV"] = sum(
        (D(row["cost"]) for row in csv.DictReader(io.StringIO(ledger_csv))), D(0)
    ).quantize(CENT)
    chart = browser.get(reverse("dashboard:money-csv", args=["waste-eur"])).content.decode()
    figures["overview CSV"] = sum(
        (D(row["leaks"]) for row in csv.DictReader(io.StringIO(chart))), D(0)
    ).quantize(CENT)
    series = api.get(
        "/api/v1/costs/",
        {"group_by": "account", "step": "month", "start": month_of(now()).isoformat()},
    ).json()["results"]
    figures["costs API"] = sum(
        (D(r["orphan_vgpu"]) + D(r["orphan_vm"]) for r in series if r["currency"] == "EUR"), D(0)
    ).quantize(CENT)
    metric = value(
        scraped(Client()), "capvco_leak_cost_month_to_date", account=account, currency="EUR"
    )
    figures["metric"] = D(str(metric)).quantize(CENT)
    return figures


def _stretch_begins(clock: SimClock) -> datetime:
    """One minute into a whole hour whose next three hours end on its day: the overview
    CSV's rows are days, each to the cent, and a stretch across midnight would be the sum of
    two rounded days, not the month's figure rounded once."""
    hour = _hour_begins(clock)
    if (hour + 3 * HOUR).date() != hour.date():
        hour = (hour + timedelta(days=1)).replace(hour=1)
        clock.to(hour + MINUTE)
    return hour


def test_a_scripted_stretch_of_a_month_costs_the_same_leaks_everywhere(
    plane: Plane, clock: SimClock, ops: User
) -> None:
    first = _stretch_begins(clock)
    _gpu_cluster(plane)
    shadow_vm, _ = _behind_our_back(plane)  # billed, not explained: never a leak
    clock.to(first + 40 * MINUTE)
    machine = _force_deleted(plane)  # its machine owned the VM for 40 minutes of the hour
    clock.to(first + HOUR + 10 * MINUTE)
    vm = VirtualMachine.objects.get(vm_id=machine.vm_id)
    with whitesky_client(plane.account) as client:  # its VM removed: its vGPU billed alone
        orphan_vm_remove(client=client, vm=vm, actor=SystemActor.RECONCILER, reason="orphan")
    plane.observe()
    leaks_record()
    clock.to(first + HOUR + 30 * MINUTE)
    auto_release_set(plane.account, confirmations=1)
    assert sweep(plane).released == ["capvco-demo-a100-0-gpu-0"]
    leaks_record()
    clock.to(first + 2 * HOUR + 5 * MINUTE)
    plane.observe()
    leaks_record()
    for hour in (first, first + HOUR):
        assert _check(plane, hour, clock).written

    checks = {check.start: check for check in BillCheck.objects.filter(location__name=NL)}
    ledger = leak_totals(leaks=Leak.objects.all(), since=month_of(clock.now()), until=clock.now())
    assert [(t.currency, t.open, t.ended) for t in ledger] == [("EUR", 0, 2)]
    # Each hour's bill check leaks what the ledger counts of that hour, no more: the first
    # hour's machine owned its VM until it was deleted with force.
    for hour in (first, first + HOUR):
        in_hour = leak_totals(leaks=Leak.objects.all(), since=hour, until=hour + HOUR)
        assert checks[hour].leaked.quantize(CENT) == in_hour[0].cost > 0
        assert checks[hour].leaked == sum(
            item.cost for item in checks[hour].items.filter(verdict=BillItem.Verdict.LEAK)
        )
    assert checks[first].owned > checks[first].leaked
    assert {
        item.external_id
        for check in checks.values()
        for item in check.items.filter(verdict=BillItem.Verdict.UNEXPLAINED)
    } == {shadow_vm} | {
        item.external_id for item in BillItem.objects.filter(name__startswith="shadow", kind="vgpu")
    }
    month = ledger[0].cost
    assert sum(check.leaked for check in checks.values()).quantize(CENT) == month
    assert _month_figures(plane, ops) == dict.fromkeys(
        [
            "leaks page", "overview page", "API summary", "API rows", "ledger CSV",
            "overview CSV", "costs API", "metric",
        ],
        month,
    )  # fmt: skip


def test_the_bill_check_names_our_released_vgpu_and_shows_the_units_it_prices_rounded(
    plane: Plane, clock: SimClock, ops: User
) -> None:
    hour = _hour_begins(clock)
    _gpu_cluster(plane)
    _behind_our_back(plane)
    machine = _force_deleted(plane)
    vm = VirtualMachine.objects.get(vm_id=machine.vm_id)
    clock.to(hour + 10 * MINUTE)
    with whitesky_client(plane.account) as client:
        orphan_vm_remove(client=client, vm=vm, actor=SystemActor.RECONCILER, reason="orphan")
    clock.to(hour + 30 * MINUTE)
    auto_release_set(plane.account, confirmations=1)
    sweep(plane)  # the vGPU, billed alone for 20 minutes, released: no longer listed
    clock.to(hour + HOUR + 5 * MINUTE)
    plane.observe()
    leaks_record()
    assert _check(plane, hour, clock).written
    browser = Client()
    browser.force_login(ops)

    page = browser.get(reverse("dashboard:bills")).content.decode()

    vgpu = BillItem.objects.get(kind="vgpu", verdict=BillItem.Verdict.LEAK)
    assert vgpu.name == "capvco-demo-a100-0-gpu-0"
    row = re.search(rf'<tr id="bill-item-{vgpu.pk}">(.*?)</tr>', page, re.S)
    assert row and "capvco-demo-a100-0-gpu-0" in row[1]
    units = [
        cells[4]
        for cells in re.findall(r'<tr id="bill-item-\d+">\s*' + r"<td[^>]*>(.*?)</td>\s*" * 6, page)
    ]
    assert units and all(
        re.fullmatch(r"(\d+\.\d\d (vCPU|GiB|vGPU)-hours)(, \d+\.\d\d (vCPU|GiB|vGPU)-hours)*", u)
        for u in units
    ), units
    for item in BillItem.objects.all():
        assert set(item.units) <= {"vcu", "mu", "vgu"}


def test_a_leak_reclaimed_by_the_sweep_is_told_ended_by_the_next_ledger_pass(
    plane: Plane, clock: SimClock
) -> None:
    _gpu_cluster(plane)
    _force_deleted(plane)
    clock.to(clock.now() + 20 * MINUTE)
    auto_release_set(plane.account, confirmations=1)
    swept = sweep(plane)
    assert swept.released and swept.removed

    leaks_record()  # the next pass, before any observation

    assert sorted(Leak.objects.values_list("kind", "end")) == [
        ("vgpu", Leak.End.RELEASED),
        ("vm", Leak.End.RELEASED),
    ]


def test_the_ledger_runs_as_often_as_observe(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["leak-ledger"]

    assert entry["task"] == "billing.tasks.leak_ledger_pass"
    assert entry["schedule"] <= settings.OBSERVE_INTERVAL


def test_a_leak_deleted_with_its_cluster_reads_released(plane: Plane, clock: SimClock) -> None:
    cluster = _gpu_cluster(plane)
    _force_deleted(plane)

    cluster_delete(cluster=cluster, actor=SystemActor.RECONCILER, reason="done with it")
    plane.converge(cluster)
    plane.observe()
    leaks_record()

    assert sorted(Leak.objects.values_list("kind", "end")) == [
        ("vgpu", Leak.End.RELEASED),
        ("vm", Leak.End.RELEASED),
    ]


def test_what_leaks_cost_this_month_never_goes_down(plane: Plane, clock: SimClock) -> None:
    _gpu_cluster(plane)
    machine = _force_deleted(plane)
    account = str(plane.account.pk)
    seen = []

    def scrape() -> None:
        samples = scraped(Client())
        seen.append(
            value(samples, "capvco_leak_cost_month_to_date", account=account, currency="EUR")
        )

    clock.to(clock.now() + 30 * MINUTE)
    plane.observe()  # still flagged: what it cost so far is known to here
    scrape()
    vm = VirtualMachine.objects.get(vm_id=machine.vm_id)
    with whitesky_client(plane.account) as client:  # behind the ledger's back: no record
        vm_remove(client, cloudspace_id=vm.cloudspace_id, vm_id=vm.vm_id)
    clock.to(clock.now() + 10 * MINUTE)
    plane.observe()
    clock.to(clock.now() + 30 * MINUTE)
    scrape()  # the ledger has not ended it yet
    leaks_record()
    scrape()

    assert seen == sorted(seen) and seen[0] > 0, seen
