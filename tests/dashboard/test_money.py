"""Money over time on the dashboard (dashboard.money, the overview's and a cluster page's
money section, the leak ledger and the bill checks), against figures computed by hand on
the world of tests/billing/test_costs.py, sampled by billing.rollups.rollups_take.

An hour of that world costs, in nl-ams (EUR): cluster prod 4.40 (pool gpu 0.36 compute +
4 vGPU, 1 of them idle; pool cpu 0.04) and orphans 1.03; in ch-zrh (CHF): prod 2.16 (pool
remote 0.16 + 2 vGPU, both idle)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from itertools import pairwise

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from billing.models import BillCheck, BillItem, CapacityRollup, CostRollup, Leak, Rollup, Step
from billing.rollups import DAY, hour_of, month_of, rollups_take
from billing.windows import Window, window_from
from cloud.models import Account, Location
from clusters.models import Machine
from dashboard.charts import Chart, LineChart, StackedBarChart
from dashboard.money import Money, cluster_money, overview_money
from gpus.models import VgpuReservation
from tests.bench.support import page_queries
from tests.billing.support import world_leaks
from tests.billing.test_costs import World, gpus_make, machine_make, world_make
from tests.factories import (
    AccountFactory,
    GpuProfileFactory,
    MachineFactory,
    MachinePoolFactory,
    MembershipFactory,
    VirtualMachineFactory,
)

pytestmark = pytest.mark.django_db

D = Decimal
State = VgpuReservation.State
T0 = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)  # the month's first day, 10:05 UTC
NOW = T0 + timedelta(minutes=5)
DEC_1 = "2026-12-01"


@pytest.fixture
def world() -> World:
    return world_make()


def _leak(account: Account, location: Location, external_id: str, **times: datetime) -> Leak:
    """A leaked vGPU at 730 a month: 1 an hour."""
    return Leak.objects.create(  # type: ignore[no-any-return]
        account=account, location=location, kind=Leak.Kind.VGPU, external_id=external_id,
        name=f"capvco-gone-{external_id}-gpu-0", currency=location.currency,
        monthly_price=D("730"), billed_since=times["leaked_since"], **times,
    )  # fmt: skip


def _sampled_two_hours(world: World) -> None:
    """09:00 and 10:00 of the 1st sampled; an A100 card of 4 free, then a second of 2."""
    GpuProfileFactory(location=world.ams, profile_id="p1", vendor="NVIDIA",
                      model="A100 0000:01:00.0", available_instances=4)  # fmt: skip
    rollups_take(now=T0 - timedelta(hours=1))
    GpuProfileFactory(location=world.ams, profile_id="p2", vendor="NVIDIA",
                      model="A100 0000:02:00.0", available_instances=2)  # fmt: skip
    rollups_take(now=T0)


def _month(now: datetime) -> Window:
    """This month by the day: the window a page asks for by default."""
    return window_from({}, now=now)


def _overview(now: datetime, **window: str) -> Money:
    """The overview's money over the window asked for (nothing: this month by the day)."""
    return overview_money(
        locations=Location.objects.all(),
        leaks=Leak.objects.all(),
        now=now,
        window=window_from(window, now=now),
    )


def _chart(charts: list[Chart], key: str) -> Chart:
    return next(chart for chart in charts if chart.key == key)


def _row(chart: Chart, day: str) -> dict[str, str]:
    row = next(row for row in chart.rows if row[0] == day)
    return dict(zip(chart.columns, row, strict=True))


def test_the_overview_adds_up_the_month_by_cluster_with_orphans_and_the_forecast(
    world: World,
) -> None:
    _sampled_two_hours(world)
    # The ledger's leaks, the two hours up to now: what orphans cost is its figure.
    world_leaks(world, T0 - timedelta(hours=2), T0)

    money = _overview(NOW)

    months = {f.point.currency: f for f in money.months}
    # Two hours of prod 4.40 and orphans 1.03 in EUR; of prod 2.16 in CHF.
    assert (months["EUR"].point.total, months["EUR"].rate_planned) == (D("10.86"), D("5.43"))
    assert (months["CHF"].point.total, months["CHF"].rate_planned) == (D("4.32"), D("2.16"))
    eur = _chart(money.charts, "cost-eur")
    assert isinstance(eur, StackedBarChart)
    assert eur.columns == ["day", "prod", "orphans", "forecast", "total"]
    assert len(eur.rows) == 31
    # The 1st: what was sampled (09:00 and 10:00, each a whole hour), and the rate for the
    # hours not sampled yet (11:00 to 24:00).
    rest_of_today = D("5.43") * D(13)
    assert _row(eur, DEC_1) == {
        "day": DEC_1, "prod": "8.80", "orphans": "2.06", "forecast": f"{rest_of_today:.2f}",
        "total": f"{D('10.86') + rest_of_today:.2f}",
    }  # fmt: skip
    assert _row(eur, "2026-12-31") == {
        "day": "2026-12-31", "prod": "0.00", "orphans": "0.00", "forecast": "130.32",
        "total": "130.32",
    }  # fmt: skip
    # The bars add up to the month's forecast.
    summed = sum((eur.total(i) for i in range(len(eur.x_labels))), D(0))
    assert summed.quantize(D("0.01")) == months["EUR"].forecast
    chf = _chart(money.charts, "cost-chf")
    assert _row(chf, DEC_1)["prod"] == "4.32"
    assert "orphans" not in chf.columns  # nothing orphaned in ch-zrh


def test_the_five_costliest_clusters_are_stacked_and_the_others_as_one_layer(
    world: World,
) -> None:
    # Six more clusters in nl-ams, of one machine of n + 1 vCPUs and 2 GiB: 0.0(n+2) an hour.
    for n in range(6):
        pool = MachinePoolFactory(site__cluster__account=world.account, site__location=world.ams,
                                  site__cluster__name=f"c{n}", name="p")  # fmt: skip
        MachineFactory(pool=pool, vm_id=300 + n, phase=Machine.Phase.RUNNING)
        VirtualMachineFactory(location=world.ams, vm_id=300 + n, vcpus=n + 1, memory_mib=2048)
    rollups_take(now=T0)
    world_leaks(world, T0 - timedelta(hours=1), T0)

    money = _overview(NOW)

    eur = _chart(money.charts, "cost-eur")
    assert eur.columns == [
        "day", "prod", "c5", "c4", "c3", "c2", "other clusters", "orphans", "forecast", "total",
    ]  # fmt: skip
    # c1 and c0: 0.03 + 0.02.
    assert eur.rows[0][1:8] == ["4.40", "0.07", "0.06", "0.05", "0.04", "0.05", "1.03"]


def test_the_overview_charts_leak_and_idle_cost_per_day_and_capacity_per_type(
    world: World,
) -> None:
    _sampled_two_hours(world)
    # Leaked from 20:00 on the 30th to 04:00 on the 1st: 4 hours on the 1st; and one open
    # since 08:00 on the 1st: 2 h 10 min by NOW.
    _leak(world.account, world.ams, "a", leaked_since=T0 - timedelta(hours=14, minutes=5),
          ended_at=T0 - timedelta(hours=6, minutes=5), end=Leak.End.RELEASED)  # fmt: skip
    _leak(world.account, world.ams, "b", leaked_since=T0 - timedelta(hours=2, minutes=5))

    money = _overview(NOW)

    leaks = D(4) + D(2) + D(10) / D(60)
    assert [(t.currency, t.cost, t.open, t.ended) for t in money.leaks] == [
        ("EUR", leaks.quantize(D("0.01")), 1, 1)
    ]
    waste = _chart(money.charts, "waste-eur")
    # Idle: node-0's second vGPU, 1 EUR an hour, sampled twice.
    assert waste.columns == ["day", "leaks", "idle GPUs"]
    assert waste.rows == [[DEC_1, f"{leaks:.2f}", "2.00"]]
    assert _chart(money.charts, "waste-chf").rows == [[DEC_1, "0.00", "4.00"]]
    a100 = _chart(money.charts, "capacity-nvidia-a100")
    # Free: 4 in the first hour, 4 + 2 in the second: 5 the day's mean.
    assert a100.columns == ["day", "free", "reserved", "attached", "allocatable", "requested"]
    assert [row[:2] for row in a100.rows] == [[DEC_1, "5.00"]]


def test_capacity_is_charted_by_the_windows_step_each_hour_sampled_joined_as_lines(
    world: World,
) -> None:
    GpuProfileFactory(location=world.ams, profile_id="p1", vendor="NVIDIA", model="A100",
                      available_instances=4)  # fmt: skip
    # The day before: its last hour (4 free); then this morning, and a card of 2 more.
    rollups_take(now=T0 - timedelta(hours=11))
    rollups_take(now=T0)
    GpuProfileFactory(location=world.ams, profile_id="p2", vendor="NVIDIA", model="A100",
                      available_instances=2)  # fmt: skip
    rollups_take(now=T0 + timedelta(hours=1))
    later = NOW + timedelta(hours=1)

    by_hour = _chart(_overview(later, window="7d", step="hour").charts, "capacity-nvidia-a100")
    by_day = _chart(_overview(later, window="7d").charts, "capacity-nvidia-a100")

    assert isinstance(by_hour, LineChart)
    assert by_hour.unit == "GPUs (the hour's mean)"
    # Each hour sampled, joined as a line; hours no pass sampled are left out.
    assert [row[:2] for row in by_hour.rows] == [
        ["2026-11-30 23:00", "4.00"], [f"{DEC_1} 10:00", "4.00"], [f"{DEC_1} 11:00", "6.00"],
    ]  # fmt: skip
    free = next(line for line in by_hour.lines if line.name == "free")
    assert len(free.points.split()) == 3
    assert by_day.unit == "GPUs (the day's mean)"
    assert [row[:2] for row in by_day.rows] == [["2026-11-30", "4.00"], [DEC_1, "5.00"]]


def test_capacity_over_the_last_days_is_charted_by_the_day(world: World) -> None:
    GpuProfileFactory(location=world.ams, profile_id="p1", vendor="NVIDIA", model="A100",
                      available_instances=4)  # fmt: skip
    for days_back in (2, 1, 0):
        rollups_take(now=T0 - days_back * DAY)

    money = _overview(NOW, window="30d")

    a100 = _chart(money.charts, "capacity-nvidia-a100")
    assert a100.x_labels == ["2026-11-29", "2026-11-30", DEC_1]
    assert a100.unit == "GPUs (the day's mean)"
    # This month's, by default: its days only.
    assert _chart(_overview(NOW).charts, "capacity-nvidia-a100").x_labels == [DEC_1]


def test_a_cluster_page_stacks_its_pools_and_forecasts_its_own_month(world: World) -> None:
    _sampled_two_hours(world)
    # The cpu pool asks for one machine more, of 2 vCPUs and 4 GiB: 0.04 an hour.
    world.cpu.replicas, world.cpu.vcpus, world.cpu.memory_mib = 3, 2, 4096
    world.cpu.save(update_fields=["replicas", "vcpus", "memory_mib"])

    money = cluster_money(
        cluster=world.cluster, locations=Location.objects.all(), now=NOW, window=_month(NOW)
    )

    months = {f.point.currency: f for f in money.months}
    assert (months["EUR"].point.total, months["EUR"].rate_planned) == (D("8.80"), D("4.44"))
    eur = _chart(money.charts, "cost-eur")
    assert eur.columns == ["day", "gpu (nl-ams)", "cpu (nl-ams)", "forecast", "total"]
    assert _row(eur, DEC_1)["gpu (nl-ams)"] == "8.72"
    assert _row(eur, DEC_1)["cpu (nl-ams)"] == "0.08"
    assert _row(eur, "2026-12-02")["forecast"] == f"{D('4.44') * 24:.2f}"
    assert _chart(money.charts, "idle-chf").rows == [[DEC_1, "4.00"]]


# --- the pages ------------------------------------------------------------------------------


class _Tables(HTMLParser):
    """The rows of each chart's table on a page, by chart key."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.chart = ""
        self.in_table = False
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "figure" and found.get("data-chart"):
            self.chart = found["data-chart"] or ""
        elif tag == "table" and "chart-table" in (found.get("class") or ""):
            self.in_table = True
            self.tables[self.chart] = []
        elif self.in_table and tag == "tr":
            self.tables[self.chart].append([])
        elif self.in_table and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.in_table = False
        elif self.cell is not None and tag in ("td", "th"):
            self.tables[self.chart][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def chart_tables(html: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(html)
    return parser.tables


def _csv_rows(client: Client, url: str) -> list[list[str]]:
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def _first_hour_sampled(world: World) -> datetime:
    """The month's first hour sampled (before now whatever the day): its figures are
    known, whatever the clock says."""
    first = month_of(timezone.now())
    rollups_take(now=first)
    return first


@pytest.fixture
def member(client: Client) -> Callable[[Account], Client]:
    def log_in(account: Account) -> Client:
        client.force_login(MembershipFactory(account=account, role="viewer").user)
        return client

    return log_in


def test_each_charts_csv_holds_the_numbers_of_its_table(
    world: World, member: Callable[[Account], Client]
) -> None:
    first = _first_hour_sampled(world)
    world_leaks(world, first, first + timedelta(hours=1))
    client = member(world.account)

    cluster = f"/clusters/{world.cluster.pk}/"
    for page, csv_base in (("/", "/money/"), (cluster, f"{cluster}money/")):
        tables = chart_tables(client.get(page).content.decode())
        assert {"cost-eur", "cost-chf"} <= set(tables), page
        for key, rows in tables.items():
            assert _csv_rows(client, f"{csv_base}{key}.csv") == rows, (page, key)
    overview = chart_tables(client.get("/").content.decode())
    day_one = next(row for row in overview["cost-eur"][1:] if row[0] == f"{first:%Y-%m-%d}")
    assert day_one[1:3] == ["4.40", "1.03"]  # prod, orphans: one hour

    # A leak and idle chart's CSV reads what it shows alone: not the clusters' ranking
    # (each pool row's compute and vGPUs summed) nor their series.
    read = {key: _queries(client, f"/money/{key}.csv") for key in ("cost-eur", "waste-eur")}
    ranking = '"billing_costrollup"."compute" + "billing_costrollup"."vgpu"'
    series = 'AND "billing_costrollup"."cluster_id" IN ('
    for clusters in (ranking, series):
        assert any(clusters in sql for sql in read["cost-eur"])
        assert not any(clusters in sql for sql in read["waste-eur"])


def _queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return [query["sql"] for query in queries.captured_queries]


def test_a_user_sees_only_their_accounts_money(
    world: World, member: Callable[[Account], Client]
) -> None:
    theirs = world_make(AccountFactory(name="globex"))
    _first_hour_sampled(world)
    now = timezone.now()
    _leak(theirs.account, theirs.ams, "theirs", leaked_since=now - timedelta(hours=1))
    BillCheck.objects.create(
        location=theirs.ams, start=hour_of(now), end=hour_of(now) + timedelta(hours=1),
        checked_at=now, currency="EUR", billed=D("9"), unexplained=D("9"),
    )  # fmt: skip
    client = member(world.account)

    overview = client.get("/").content.decode()
    figures = re.search(r'<table class="compact" id="month-figures">.*?</table>', overview, re.S)

    assert figures is not None and "acme" in figures[0] and "globex" not in figures[0]
    # Each currency's cost is acme's alone: one prod per currency.
    # acme leaked nothing this month: no orphans layer, as no leak.
    assert chart_tables(overview)["cost-eur"][0] == ["day", "prod", "forecast", "total"]
    assert "No leak this month." in overview
    assert client.get(f"/clusters/{theirs.cluster.pk}/").status_code == 404
    assert client.get(f"/clusters/{theirs.cluster.pk}/money/cost-eur.csv").status_code == 404
    assert "capvco-gone-theirs" not in client.get("/leaks/").content.decode()
    assert "bill-checks-empty" in client.get("/bills/").content.decode()


def test_the_leak_ledger_keeps_what_an_ended_leak_cost(
    world: World, member: Callable[[Account], Client]
) -> None:
    now = timezone.now()
    ended = _leak(world.account, world.ams, "old", leaked_since=now - timedelta(days=40),
                  ended_at=now - timedelta(days=40) + timedelta(hours=41, minutes=12),
                  end=Leak.End.RELEASED)  # fmt: skip
    _leak(world.account, world.ams, "new", leaked_since=now - timedelta(minutes=30))
    client = member(world.account)

    everything = client.get("/leaks/").content.decode()
    still_open = client.get("/leaks/", {"open": "true"}).content.decode()

    row = re.search(rf'<tr id="leak-{ended.pk}".*?</tr>', everything, re.S)
    assert row is not None and "41.20 EUR" in row[0] and "released" in row[0]
    assert "capvco-gone-new" in still_open and "capvco-gone-old" not in still_open
    assert client.get("/leaks/", {"kind": "gpu"}).status_code == 400


def test_the_bill_page_shows_each_locations_latest_check_and_what_it_could_not_explain(
    world: World, member: Callable[[Account], Client]
) -> None:
    now = hour_of(timezone.now())
    for hours_ago, unexplained in ((2, D("5")), (1, D("1.25"))):
        check = BillCheck.objects.create(
            location=world.ams, start=now - timedelta(hours=hours_ago),
            end=now - timedelta(hours=hours_ago - 1), checked_at=now, currency="EUR",
            billed=D("10") + unexplained, owned=D("9"), leaked=D("1"), unexplained=unexplained,
        )  # fmt: skip
    BillItem.objects.create(
        bill=check, kind=BillItem.Kind.VM, external_id="4711", name="made-by-hand",
        verdict=BillItem.Verdict.UNEXPLAINED, units={"vcu": 1}, cost=D("1.25"),
    )  # fmt: skip

    page = member(world.account).get("/bills/").content.decode()

    assert page.count('<tr id="bill-check-') == 1  # the latest hour only
    assert "1.25 EUR" in page and "made-by-hand" in page and "billed, not explained" in page


# --- a fixed number of queries, however long the history ----------------------------------


def _history(now: datetime, days: range) -> None:
    """Days of history before this month's first sampled hour (`days` back from it): each
    day's rows copied from that hour as day rows of 24 samples, and the day before the
    month also as its 24 hours."""
    first = month_of(now)
    costs = list(CostRollup.objects.filter(step=Step.HOUR, start=first))
    capacity = list(CapacityRollup.objects.filter(step=Step.HOUR, start=first))

    def copy(step: str, start: datetime, samples: int) -> None:
        Rollup.objects.create(step=step, start=start, taken_at=start)
        for row in [*costs, *capacity]:
            row.pk, row.step, row.start, row.samples = None, step, start, samples
        CostRollup.objects.bulk_create(costs)
        CapacityRollup.objects.bulk_create(capacity)

    for n in days:
        day = first - n * DAY
        copy(Step.DAY, day, 24)
        for hour in range(24) if n == 1 else ():
            copy(Step.HOUR, day + timedelta(hours=hour), 1)


def _counts(client: Client, world: World) -> dict[str, int]:
    pages = ["/", f"/clusters/{world.cluster.pk}/", "/money/cost-eur.csv",
             f"/clusters/{world.cluster.pk}/money/cost-eur.csv", "/leaks/", "/bills/"]  # fmt: skip
    return {page: page_queries(client, page) for page in pages}


def test_the_money_pages_make_as_many_queries_with_a_year_of_history(
    world: World, member: Callable[[Account], Client]
) -> None:
    now = timezone.now()
    _first_hour_sampled(world)
    client = member(world.account)
    _history(now, range(1, 3))
    short = _counts(client, world)

    _history(now, range(3, 366))
    long = _counts(client, world)

    assert CostRollup.objects.filter(step=Step.DAY).count() >= 365 * 3
    assert long == short, (short, long)


def _month_table(html: str) -> dict[tuple[str, str], list[str]]:
    """The money section's month figures, by (account or cluster, currency): month to date,
    per hour now, per hour planned, forecast, hours sampled, as shown."""
    table = re.search(r'<table class="compact" id="month-figures">(.*?)</table>', html, re.S)
    assert table is not None
    rows = {}
    for name, cells in re.findall(r'<th scope="row">(.*?)</th>(.*?)</tr>', table[1], re.S):
        shown = [re.sub(r"<[^>]+>", "", cell).split()[0] for cell in re.findall(
            r"<td[^>]*>(.*?)</td>", cells, re.S)]  # fmt: skip
        rows[name.strip(), shown[0]] = shown[1:]
    return rows


def _month_answered(api: APIClient, group_by: str) -> dict[tuple[str, str], list[str]]:
    """The API's month, shown as the page shows it (to the cent, the rates to 4 places)."""
    found = {}
    for row in api.get("/api/v1/costs/month/", {"group_by": group_by}).json():
        name = row["account_name" if group_by == "account" else "cluster_name"]
        cents = [f"{D(row[key]):.2f}" for key in ("spent", "forecast")]
        found[name, row["currency"]] = [
            cents[0], f"{D(row['rate_now']):.4f}", f"{D(row['rate_planned']):.4f}", cents[1],
            str(row["hours_sampled"]),
        ]  # fmt: skip
    return found


def test_the_month_is_the_hourly_samples_in_as_many_queries_with_more_machines(
    world: World, client: Client
) -> None:
    first = _first_hour_sampled(world)
    user = MembershipFactory(account=world.account, role="viewer").user
    client.force_login(user)
    api = APIClient()
    api.force_login(user)
    cluster = f"/clusters/{world.cluster.pk}/"
    pages = {"/": "account", cluster: "cluster"}

    def shown() -> tuple[dict[str, int], dict[str, dict[tuple[str, str], list[str]]]]:
        counts = {page: page_queries(client, page) for page in pages}
        tables = {page: _month_table(client.get(page).content.decode()) for page in pages}
        for page, group_by in pages.items():  # the page says what the API answers
            assert tables[page] == _month_answered(api, group_by), page
        return counts, tables

    few, before = shown()
    for index in range(20):  # 20 GPU machines more, each a VM and an attached vGPU
        machine = machine_make(world.gpu, f"x{index}", 1000 + index, vcpus=2, mib=2048)
        gpus_make(machine, State.ATTACHED)
    world.gpu.replicas = 22
    world.gpu.save(update_fields=["replicas"])
    unsampled = shown()[1]
    # The hour sampled again, now with them (as the next hour's sample would).
    for model in (Rollup, CostRollup, CapacityRollup):
        model.objects.all().delete()
    rollups_take(now=first)
    many, after = shown()

    assert many == few, (few, many)
    eur = ("acme", "EUR")
    # The rate is the sample's: the machines count once sampled, not before; until then
    # the plan counts them missing from the sample, at the pool's list price.
    assert unsampled["/"][eur][:2] == before["/"][eur][:2]
    assert D(unsampled["/"][eur][2]) > D(before["/"][eur][2])
    # 20 machines of 2 vCPUs and 2 GiB (0.03 an hour) and a vGPU (1 an hour) each; the
    # pool at its replicas: planned as now.
    assert D(after["/"][eur][1]) - D(before["/"][eur][1]) == D("20.60")
    assert after["/"][eur][2] == after["/"][eur][1]
    # The month to date shown is the cost chart's (its CSV), day by day.
    for page, csv_url in (("/", "/money/cost-eur.csv"), (cluster, f"{cluster}money/cost-eur.csv")):
        rows = _csv_rows(client, csv_url)
        day = dict(zip(rows[0], next(r for r in rows if r[0] == f"{first:%Y-%m-%d}"), strict=True))
        spent = sum(D(v) for k, v in day.items() if k not in ("day", "forecast", "total"))
        name = "acme" if page == "/" else "prod"
        assert after[page][name, "EUR"][0] == f"{spent:.2f}", (page, day)


def test_gpu_types_whatever_their_names_get_a_chart_and_a_csv_each(
    world: World, member: Callable[[Account], Client]
) -> None:
    for n, model in enumerate(["Ä100 0000:01:00.0", "A100 0000:02:00.0"]):
        GpuProfileFactory(location=world.ams, profile_id=f"p{n}", vendor="NVIDIA", model=model)
    GpuProfileFactory(location=world.zrh, profile_id="p9", vendor="nvidia", model="a100")
    _first_hour_sampled(world)
    client = member(world.account)

    tables = chart_tables(client.get("/").content.decode())

    capacity = sorted(key for key in tables if key.startswith("capacity-"))
    assert len(capacity) == len(set(capacity)) >= 3
    for key in capacity:
        assert _csv_rows(client, f"/money/{key}.csv") == tables[key]


def test_a_charts_names_and_labels_are_escaped_in_its_bars_and_its_table() -> None:
    from django.template.loader import render_to_string

    from dashboard.charts import Series

    chart = StackedBarChart(
        key="k", title="t", unit="EUR per day", x_title="day", x_labels=["a<b>&c"],
        series=[Series('<img src=x onerror="1">', [Decimal("2.5")])], unit_short="EUR",
    )  # fmt: skip

    html = render_to_string("dashboard/_chart.html", {"chart": chart})

    assert "<img" not in html and "<b>" not in html
    assert (
        "<title>&lt;img src=x onerror=&quot;1&quot;&gt;, a&lt;b&gt;&amp;c: 2.50 EUR</title>" in html
    )
    assert '<th scope="row">a&lt;b&gt;&amp;c</th><td class="num">2.50</td>' in html


def _captions(html: str) -> dict[str, str]:
    """Each chart's caption as a reader sees it, by the chart's key."""
    found = re.findall(r'data-chart="([^"]+)">\s*<figcaption>(.*?)</figcaption>', html, re.S)
    return {key: " ".join(re.sub(r"<[^>]+>", " ", text).split()) for key, text in found}


def test_a_charts_caption_names_its_unit_once(
    world: World, member: Callable[[Account], Client]
) -> None:
    GpuProfileFactory(location=world.ams, profile_id="p1", vendor="NVIDIA", model="A100")
    _first_hour_sampled(world)
    client = member(world.account)

    for page in ("/", f"/clusters/{world.cluster.pk}/"):
        captions = _captions(client.get(page).content.decode())
        assert {"cost-eur", "cost-chf"} <= set(captions), page
        for key, caption in captions.items():
            words = caption.replace(",", "").split()
            assert all(a != b for a, b in pairwise(words)), caption
            for unit in ("EUR", "CHF", "GPUs", "per day"):
                assert caption.count(unit) <= 1, (key, caption)


def test_an_hourly_weeks_axis_labels_do_not_run_into_each_other() -> None:
    from dashboard.charts import TICK_CHAR_WIDTH, Series

    hours = [f"2026-12-{1 + h // 24:02d} {h % 24:02d}:00" for h in range(168)]
    chart = StackedBarChart(
        key="k", title="t", unit="EUR per hour", x_title="hour", x_labels=hours,
        series=[Series("prod", [Decimal(1)] * 168)], unit_short="EUR",
    )  # fmt: skip

    ticks = chart.x_ticks
    assert ticks[0].label == "12-01 00:00"  # the hour without its year; the table keeps it
    assert chart.rows[0][0] == "2026-12-01 00:00"
    # Centred labels: two neighbours are at least a label's width apart.
    room = len("12-01 00:00") * TICK_CHAR_WIDTH
    assert all(b.at - a.at >= room for a, b in pairwise(ticks))
    assert len(ticks) >= 4
    assert ticks[-1].at + room / 2 <= chart.width  # the last one within the picture


def test_a_lines_points_are_written_as_its_coordinates_rounded_to_two_places() -> None:
    from random import Random

    from dashboard.charts import Series, _coordinates

    # Halves that are not halves in binary, a negative zero, whole numbers, the edges.
    edges = [0.0, -0.0, -0.001, 0.001, 0.005, 0.015, 0.125, 2.675, 1.0, 10.1, 209.995, 640.0]
    rng = Random(7)
    draws = [rng.uniform(0, 640) for _ in range(2000)]
    assert _coordinates(edges + draws) == [str(round(v, 2)) for v in edges + draws]

    values = [Decimal("0"), Decimal("1.5"), Decimal("2.675"), Decimal("7")] * 5
    chart = LineChart(
        key="k", title="t", unit="GPUs", x_title="day", x_labels=[f"d{i}" for i in range(20)],
        series=[Series("free", values)],
    )  # fmt: skip
    ys = chart.ys(chart.floats[0])
    expected = " ".join(f"{x},{y}" for x, y in zip(chart.xs, ys, strict=True))
    assert chart.lines[0].points == expected
