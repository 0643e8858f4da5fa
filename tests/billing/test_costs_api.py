"""The money endpoints (billing.api): /api/v1/costs/ now and over time, the month to date
and its forecast, the leak ledger and its summary, as JSON and as CSV, against figures
computed by hand on the world of tests/billing/test_costs.py (an hour of nl-ams: pool gpu
0.36 compute + 4 vGPU, pool cpu 0.04, orphans 1 + 0.03 EUR; ch-zrh: pool remote 0.16 + 2
CHF), sampled by billing.rollups.rollups_take at fixed moments."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from openapi_spec_validator import validate
from rest_framework.test import APIClient

from billing.models import CostRollup, Leak, Rollup, Step
from billing.rollups import day_of, hour_of, month_of, rollups_take
from billing.selectors import SERIES_ROWS_MAX, SeriesStep
from billing.windows import PRESETS, preset
from capvco_web.integrations.kube import LABEL_KEY_PATTERN
from clusters.models import MachinePool
from gpus.models import VgpuReservation
from tests.billing.support import world_leaks
from tests.billing.test_costs import World, gpus_make, labelled, machine_make, world_make
from tests.factories import (
    AccountFactory,
    KubeNodeFactory,
    KubePodFactory,
    MembershipFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

D = Decimal
State = VgpuReservation.State
T0 = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)  # a Tuesday, 10:05 UTC
DAY_START = "2026-12-01T00:00:00Z"
NEXT_DAY = "2026-12-02T00:00:00Z"


@pytest.fixture
def world() -> World:
    return world_make()


@pytest.fixture
def hours_kept_long(settings: Any) -> None:
    """The fixed moments above stay within the hours kept, whenever the suite runs."""
    settings.COST_HOURLY_HISTORY_DAYS = 36_500


def _three_hours(world: World) -> None:
    """10:00, 11:00 and 12:00 of T0's day; the third with one more attached vGPU on m0
    (1 EUR an hour more, and idle: no pod asks for it)."""
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(hours=1))
    VgpuReservation.objects.create(
        location=world.ams, name="capvco-prod-m0-gpu-9", vgpu_id="v-extra",
        state=State.ATTACHED, machine=world.machines["m0"], vm_id=100,
    )  # fmt: skip
    rollups_take(now=T0 + timedelta(hours=2))


def _figures(row: dict[str, Any], *names: str) -> tuple[Any, ...]:
    return tuple(row[name] for name in names)


def _csv(api: APIClient, url: str, params: dict[str, Any], **headers: str) -> list[dict[str, str]]:
    response = api.get(url, params, **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def _as_cells(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return [{name: cell(value) for name, value in row.items()} for row in rows]


# The cost per hour now (moved here with the view, as it answered before history).


@pytest.mark.parametrize(
    ("group_by", "keys"),
    [
        ("account", [("acme", None, None, None, "CHF"), ("acme", None, None, None, "EUR")]),
        (
            "location",
            [("acme", "ch-zrh", None, None, "CHF"), ("acme", "nl-ams", None, None, "EUR")],
        ),
        ("cluster", [("acme", None, "prod", None, "CHF"), ("acme", None, "prod", None, "EUR")]),
        (
            "pool",
            [
                ("acme", "nl-ams", "prod", "cpu", "EUR"),
                ("acme", "nl-ams", "prod", "gpu", "EUR"),
                ("acme", "ch-zrh", "prod", "remote", "CHF"),
            ],
        ),
    ],
)
def test_the_api_groups_by_each_key(
    api: APIClient, world: World, group_by: str, keys: list[tuple[Any, ...]]
) -> None:
    response = api.get("/api/v1/costs/", {"group_by": group_by})

    assert response.status_code == 200, response.content
    names = ("account_name", "location_name", "cluster_name", "pool_name", "currency")
    assert [_figures(row, *names) for row in response.json()] == keys


def test_the_api_answers_figures_as_decimals_and_groups_by_account_by_default(
    api: APIClient, world: World
) -> None:
    rows = api.get("/api/v1/costs/").json()

    assert rows[1] == {
        "account": world.account.pk, "account_name": "acme", "location": None,
        "location_name": None, "cluster": None, "cluster_name": None, "pool": None,
        "pool_name": None, "namespace": None, "currency": "EUR", "machines": 4,
        "compute": "0.4000", "vgpu": "4.0000", "idle_gpus": 1, "idle": "1.0000",
        "orphan_vgpu": "1.0000", "orphan_vm": "0.0300", "total": "5.4300",
    }  # fmt: skip


def test_the_api_by_namespace_shows_the_idle_rest_apart(api: APIClient, world: World) -> None:
    rows = api.get("/api/v1/costs/", {"group_by": "namespace"}).json()

    assert [(row["namespace"], row["vgpu"], row["idle"]) for row in rows] == [
        ("infer", "1.0000", "0.0000"),
        ("train", "1.0000", "0.0000"),
        (None, "2.0000", "2.0000"),
        (None, "1.0000", "1.0000"),
    ]


def test_the_api_filters_by_location(api: APIClient, world: World) -> None:
    rows = api.get("/api/v1/costs/", {"group_by": "pool", "location": world.zrh.pk}).json()

    assert [row["pool_name"] for row in rows] == ["remote"]


@pytest.mark.parametrize("value", ["machine", "", "Pool"])
def test_a_bad_group_by_is_refused_naming_the_parameter(
    api: APIClient, world: World, value: str
) -> None:
    response = api.get("/api/v1/costs/", {"group_by": value})

    assert response.status_code == 400
    body = response.json()
    assert list(body["fields"]) == ["group_by"]
    assert "account, location, cluster, pool, namespace" in body["fields"]["group_by"][0]


def test_group_by_given_twice_is_refused(api: APIClient, world: World) -> None:
    response = api.get("/api/v1/costs/?group_by=pool&group_by=cluster")

    assert (response.status_code, list(response.json()["fields"])) == (400, ["group_by"])


def test_a_user_of_another_account_sees_nothing_of_this_one(world: World) -> None:
    theirs = world_make(AccountFactory(name="other"))
    viewer = UserFactory()
    MembershipFactory(user=viewer, account=theirs.account, role="viewer")
    api = APIClient()
    api.force_login(viewer)

    for group_by in ("account", "location", "cluster", "pool", "namespace"):
        rows = api.get("/api/v1/costs/", {"group_by": group_by}).json()
        assert rows and {row["account_name"] for row in rows} == {"other"}, group_by
    by_account_id = api.get("/api/v1/costs/", {"account": world.account.pk})
    assert (by_account_id.status_code, by_account_id.json()) == (200, [])


def test_a_user_of_no_account_sees_no_costs(world: World) -> None:
    api = APIClient()
    api.force_login(UserFactory())

    assert api.get("/api/v1/costs/", {"group_by": "pool"}).json() == []


def test_without_credentials_the_costs_answer_401(world: World) -> None:
    assert APIClient().get("/api/v1/costs/").status_code == 401
    assert APIClient().get("/api/v1/costs/", {"format": "csv"}).status_code == 401


def _more_gpu_machines(world: World, n: int) -> None:
    for index in range(n):
        vm_id = 1000 + MachinePool.objects.count() * 100 + index
        machine = machine_make(world.gpu, f"x{vm_id}", vm_id, vcpus=2, mib=2048)
        gpus_make(machine, State.ATTACHED)
        node = KubeNodeFactory(cluster=world.cluster, machine=machine, name=f"n{vm_id}")
        KubePodFactory(cluster=world.cluster, node_name=node.name, namespace=f"ns{index % 3}")


@pytest.mark.parametrize("group_by", ["account", "location", "cluster", "pool", "namespace"])
def test_the_query_count_does_not_grow_with_the_machines(
    api: APIClient, world: World, group_by: str
) -> None:
    def counted() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = api.get("/api/v1/costs/", {"group_by": group_by})
            assert response.status_code == 200
        return len(queries)

    few = counted()
    _more_gpu_machines(world, 20)
    many = counted()

    assert many == few, (few, many)
    assert few <= 11, few  # locations 1, names 2, orphans 2, machines 3, nodes 3


# Over time: the series.


@pytest.mark.usefixtures("hours_kept_long")
def test_hours_answer_what_each_sampled_hour_cost(api: APIClient, world: World) -> None:
    _three_hours(world)

    response = api.get(
        "/api/v1/costs/",
        {"group_by": "cluster", "start": "2026-12-01T10:00:00Z",
         "end": "2026-12-01T14:00:00Z", "step": "hour"},
    )  # fmt: skip

    assert response.status_code == 200, response.content
    body = response.json()
    assert _figures(body, "step", "start", "end", "hours_sampled") == (
        "hour", "2026-12-01T10:00:00Z", "2026-12-01T14:00:00Z", 3,
    )  # fmt: skip
    names = ("start", "currency", "hours", "hours_sampled", "total")
    # 13:00 was not sampled: no row, not an estimate.
    assert [_figures(row, *names) for row in body["results"]] == [
        ("2026-12-01T10:00:00Z", "CHF", 1, 1, "2.1600"),
        ("2026-12-01T10:00:00Z", "EUR", 1, 1, "4.4000"),
        ("2026-12-01T11:00:00Z", "CHF", 1, 1, "2.1600"),
        ("2026-12-01T11:00:00Z", "EUR", 1, 1, "4.4000"),
        ("2026-12-01T12:00:00Z", "CHF", 1, 1, "2.1600"),
        ("2026-12-01T12:00:00Z", "EUR", 1, 1, "5.4000"),
    ]


@pytest.mark.usefixtures("hours_kept_long")
def test_a_day_sums_its_sampled_hours_into_amounts(api: APIClient, world: World) -> None:
    _three_hours(world)
    query = {"group_by": "cluster", "start": DAY_START, "end": NEXT_DAY}

    from_hours = api.get("/api/v1/costs/", query).json()
    rollups_take(now=T0 + timedelta(days=1))  # the day is summed into day rows
    from_days = api.get("/api/v1/costs/", query).json()

    assert from_days == from_hours
    eur = from_days["results"][1]
    # 3 hours of the four EUR machines; compute 3 * 0.40; vGPUs 3 * 4 + the extra one;
    # idle: node-0's unrequested vGPU each hour, and the extra one in the third.
    assert eur == {
        "account": world.account.pk, "account_name": "acme", "location": None,
        "location_name": None, "cluster": world.cluster.pk, "cluster_name": "prod",
        "pool": None, "pool_name": None, "namespace": None, "currency": "EUR",
        "start": DAY_START, "hours": 24, "hours_sampled": 3, "machine_hours": 12,
        "compute": "1.2000", "vgpu": "13.0000", "idle_gpu_hours": 4, "idle": "4.0000",
        "orphan_vgpu": None, "orphan_vm": None, "total": "14.2000",
    }  # fmt: skip
    chf = from_days["results"][0]
    assert _figures(chf, "currency", "machine_hours", "compute", "vgpu", "total") == (
        "CHF", 3, "0.4800", "6.0000", "6.4800",
    )  # fmt: skip


@pytest.mark.usefixtures("hours_kept_long")
def test_a_month_of_accounts_carries_the_orphans(api: APIClient, world: World) -> None:
    _three_hours(world)
    # The ledger's leaks, over the same three hours: what orphans cost is its figure.
    hour = T0.replace(minute=0)
    world_leaks(world, hour, hour + timedelta(hours=3))

    body = api.get(
        "/api/v1/costs/",
        {"start": "2026-12-01T00:00:00Z", "end": "2027-01-01T00:00:00Z", "step": "month"},
    ).json()

    names = ("start", "currency", "hours", "hours_sampled", "orphan_vgpu", "orphan_vm", "total")
    # EUR: 3 * (4.40 + 1 + 0.03) + the extra vGPU's hour.
    assert [_figures(row, *names) for row in body["results"]] == [
        (DAY_START, "CHF", 744, 3, "0.0000", "0.0000", "6.4800"),
        (DAY_START, "EUR", 744, 3, "3.0000", "0.0900", "17.2900"),
    ]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"start": NEXT_DAY, "end": DAY_START}, "end"),
        ({"start": DAY_START, "end": DAY_START}, "end"),
        ({"start": "2026-12-01T10:30:00Z", "end": "2026-12-01T12:00:00Z", "step": "hour"}, "start"),
        ({"start": "2026-12-01T10:00:00Z", "end": NEXT_DAY}, "start"),
        ({"start": NEXT_DAY, "end": "2027-01-01T00:00:00Z", "step": "month"}, "start"),
        ({"start": DAY_START, "step": "week"}, "step"),
        ({"start": "2024-01-01T00:00:00Z", "end": "2026-12-01T00:00:00Z"}, "end"),
        ({"end": NEXT_DAY}, "start"),
        ({"step": "day"}, "start"),
        ({"start": "yesterday"}, "start"),
        # A NUL or a line break is no part of a date: not read as the date before it.
        ({"start": f"{DAY_START}\x00"}, "start"),
        ({"start": "2026-12-01T00:00:00\x00Z"}, "start"),
        ({"start": DAY_START, "end": f"{NEXT_DAY}\n"}, "end"),
    ],
)
@pytest.mark.usefixtures("hours_kept_long")
def test_a_series_out_of_bounds_is_refused_naming_the_parameter(
    api: APIClient, world: World, query: dict[str, str], field: str
) -> None:
    response = api.get("/api/v1/costs/", query)

    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [field], response.json()


@pytest.mark.usefixtures("hours_kept_long")
@pytest.mark.parametrize(("window", "step"), [("7d", "hour"), ("30d", "day"), ("month", "month")])
def test_a_window_the_pages_offer_is_answered_as_its_start_and_end(
    api: APIClient, world: World, window: str, step: SeriesStep, monkeypatch: pytest.MonkeyPatch
) -> None:
    _three_hours(world)  # on 2026-12-01, inside each of these windows asked on the 6th
    now = T0 + timedelta(days=5)
    monkeypatch.setattr(timezone, "now", lambda: now)
    picked = preset(window, step, now)

    by_name = api.get("/api/v1/costs/", {"group_by": "cluster", "window": window, "step": step})
    by_bounds = api.get(
        "/api/v1/costs/",
        {"group_by": "cluster", "start": _iso(picked.start), "end": _iso(picked.end),
         "step": step},
    )  # fmt: skip

    assert by_name.status_code == 200, by_name.content
    assert by_name.json() == by_bounds.json()
    assert _figures(by_name.json(), "start", "end") == (_iso(picked.start), _iso(picked.end))
    assert by_name.json()["results"], "the three hours are in the window"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"window": "7d", "start": DAY_START}, "window"),
        ({"window": "7d", "end": NEXT_DAY}, "window"),
        ({"window": "week"}, "window"),
        ({"window": "7d", "step": "month"}, "step"),
        ({"window": "7d", "step": "week"}, "step"),
    ],
)
def test_a_window_not_offered_or_given_with_bounds_is_refused_naming_the_parameter(
    api: APIClient, world: World, query: dict[str, str], field: str
) -> None:
    for url in ("/api/v1/costs/", f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/"):
        response = api.get(url, {"key": "team", **query} if "label" in url else query)

        assert response.status_code == 400, response.content
        assert list(response.json()["fields"]) == [field], response.json()
    twice = api.get("/api/v1/costs/?window=7d&window=30d")
    assert (twice.status_code, list(twice.json()["fields"])) == (400, ["window"])


def test_a_bound_given_twice_is_refused(api: APIClient, world: World) -> None:
    response = api.get(f"/api/v1/costs/?start={DAY_START}&start={NEXT_DAY}")

    assert (response.status_code, list(response.json()["fields"])) == (400, ["start"])


def test_hours_past_those_kept_are_refused_saying_how_long_they_are_kept(
    api: APIClient, world: World, settings: Any
) -> None:
    settings.COST_HOURLY_HISTORY_DAYS = 60
    kept_from = hour_of(timezone.now()) - timedelta(days=60)
    before = (kept_from - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

    refused = api.get("/api/v1/costs/", {"start": before, "step": "hour"})
    by_day = api.get(
        "/api/v1/costs/", {"start": before[:10] + "T00:00:00Z", "step": "day"}
    )  # fmt: skip

    assert refused.status_code == 400
    assert list(refused.json()["fields"]) == ["start"]
    assert "kept 60 days" in refused.json()["fields"]["start"][0]
    assert by_day.status_code == 200, by_day.content


@pytest.mark.usefixtures("hours_kept_long")
def test_a_series_of_more_rows_than_answered_at_once_is_refused(
    api: APIClient, world: World
) -> None:
    first = datetime(2025, 1, 1, tzinfo=UTC)
    CostRollup.objects.bulk_create(
        CostRollup(
            step=Step.HOUR, start=first + timedelta(hours=n), kind=CostRollup.Kind.POOL,
            account=world.account, location=world.ams, currency="EUR",
            cluster_id=world.cluster.pk, cluster_name="prod", pool_id=world.gpu.pk,
            pool_name="gpu", compute=D("0.36"),
        )
        for n in range(SERIES_ROWS_MAX + 1)
    )  # fmt: skip
    end = (first + timedelta(hours=SERIES_ROWS_MAX + 1)).strftime("%Y-%m-%dT%H:00:00Z")
    query = {"start": "2025-01-01T00:00:00Z", "end": end, "group_by": "pool"}

    by_hour = api.get("/api/v1/costs/", {**query, "step": "hour"})
    by_day = api.get("/api/v1/costs/", {**query, "end": end[:10] + "T00:00:00Z"})

    assert by_hour.status_code == 400
    assert list(by_hour.json()["fields"]) == ["step"]
    assert by_day.status_code == 200
    assert len(by_day.json()["results"]) == 416  # whole days of 10,001 hours


@pytest.mark.usefixtures("hours_kept_long")
def test_the_queries_of_a_series_do_not_grow_with_the_history(api: APIClient, world: World) -> None:
    def counted(days: int) -> int:
        for day in range(days):
            rollups_take(now=T0 + timedelta(days=day))
        end = (T0 + timedelta(days=days)).strftime("%Y-%m-%dT00:00:00Z")
        with CaptureQueriesContext(connection) as queries:
            for step, until in (("hour", end), ("day", end), ("month", "2027-01-01T00:00:00Z")):
                query = {"start": DAY_START, "end": until, "step": step}
                response = api.get("/api/v1/costs/", query)
                assert response.status_code == 200, response.content
        return len(queries)

    short = counted(2)
    long = counted(12)

    assert Rollup.objects.filter(step=Step.DAY).count() == 11
    assert long == short, (short, long)


# The month to date and its forecast.


def test_the_month_says_what_was_spent_the_rate_and_the_forecast(
    api: APIClient, world: World
) -> None:
    now = timezone.now()
    rollups_take(now=now)  # this hour, in this month whatever the day
    # The ledger's leaks, one hour this month: what orphans cost is its figure.
    world_leaks(world, month_of(now), month_of(now) + timedelta(hours=1))
    # The cpu pool asks for one machine more, of 2 vCPUs and 4 GiB: 0.04/h at list price.
    world.cpu.replicas, world.cpu.vcpus, world.cpu.memory_mib = 3, 2, 4096
    world.cpu.save(update_fields=["replicas", "vcpus", "memory_mib"])

    rows = api.get("/api/v1/costs/month/", {"group_by": "cluster"}).json()

    names = ("cluster_name", "currency", "hours_sampled", "spent", "rate_now", "rate_planned")
    assert [_figures(row, *names) for row in rows] == [
        ("prod", "CHF", 1, "2.1600", "2.1600", "2.1600"),
        ("prod", "EUR", 1, "4.4000", "4.4000", "4.4400"),
    ]
    for row in rows:
        expected = D(row["spent"]) + D(row["rate_planned"]) * D(row["hours_left"])
        # hours_left is shown to the hundredth of an hour, the forecast to the cent.
        assert abs(D(row["forecast"]) - expected) < D("0.05")
        assert row["month_start"] == now.strftime("%Y-%m-01T00:00:00Z")
    accounts = api.get("/api/v1/costs/month/").json()
    assert [_figures(row, "account_name", "currency", "spent") for row in accounts] == [
        ("acme", "CHF", "2.1600"),
        ("acme", "EUR", "5.4300"),
    ]


@pytest.mark.parametrize("group_by", ["pool", "namespace", "location", ""])
def test_the_month_is_of_accounts_or_clusters_only(
    api: APIClient, world: World, group_by: str
) -> None:
    response = api.get("/api/v1/costs/month/", {"group_by": group_by})

    assert (response.status_code, list(response.json()["fields"])) == (400, ["group_by"])


# The leak ledger.

DECEMBER = datetime(2026, 12, 1, tzinfo=UTC)


def _leaks(world: World) -> dict[str, Leak]:
    """In nl-ams at 1 EUR an hour: `a` leaked since November, released 10 hours into
    December; `b` open since 19:00 on 1 December; `c` a VM gone after 41 h 12 min."""
    common = {"account": world.account, "location": world.ams, "currency": "EUR",
              "monthly_price": D("730")}  # fmt: skip
    return {
        "a": Leak.objects.create(
            **common, kind=Leak.Kind.VGPU, external_id="a", name="capvco-prod-gone-gpu-0",
            billed_since=DECEMBER - timedelta(days=3), leaked_since=DECEMBER - timedelta(days=2),
            ended_at=DECEMBER + timedelta(hours=10), end=Leak.End.RELEASED,
        ),
        "b": Leak.objects.create(
            **common, kind=Leak.Kind.VGPU, external_id="b", name="=HYPERLINK(\"x\")",
            billed_since=DECEMBER + timedelta(hours=19),
            leaked_since=DECEMBER + timedelta(hours=19),
        ),
        "c": Leak.objects.create(
            **common, kind=Leak.Kind.VM, external_id="900", name="capvco-prod-gone",
            billed_since=DECEMBER, leaked_since=DECEMBER,
            ended_at=DECEMBER + timedelta(hours=41, minutes=12), end=Leak.End.GONE,
        ),
    }  # fmt: skip


def test_the_ledger_lists_each_leak_with_what_it_cost(api: APIClient, world: World) -> None:
    leaks = _leaks(world)

    body = api.get("/api/v1/leaks/").json()

    assert (body["count"], body["next"]) == (3, None)
    rows = {row["external_id"]: row for row in body["results"]}
    # a: 58 hours leaked (29 Nov 00:00 to 1 Dec 10:00), 82 billed.
    assert _figures(rows["a"], "open", "end", "cost", "billed_cost") == (
        False, "released", "58.0000", "82.0000",
    )  # fmt: skip
    assert _figures(rows["900"], "kind", "cost", "billed_cost") == ("vm", "41.2000", "41.2000")
    assert rows["b"]["open"] is True and rows["b"]["ended_at"] is None
    assert rows["a"]["account_name"] == "acme" and rows["a"]["location_name"] == "nl-ams"
    assert rows["a"]["id"] == leaks["a"].pk


@pytest.mark.parametrize(
    ("query", "listed"),
    [
        ({"open": "true"}, ["b"]),
        ({"open": "false"}, ["a", "900"]),
        ({"kind": "vm"}, ["900"]),
        ({"end": "released"}, ["a"]),
        ({"location__name": "nl-ams"}, ["a", "b", "900"]),
        ({"location__name": "ch-zrh"}, []),
    ],
)
def test_the_ledger_filters_like_every_list(
    api: APIClient, world: World, query: dict[str, str], listed: list[str]
) -> None:
    _leaks(world)

    rows = api.get("/api/v1/leaks/", query).json()["results"]

    assert [row["external_id"] for row in rows] == listed


def test_the_summary_says_what_leaks_cost_in_a_period_and_how_many_are_open(
    api: APIClient, world: World
) -> None:
    _leaks(world)

    body = api.get(
        "/api/v1/leaks/summary/", {"since": DAY_START, "until": NEXT_DAY}
    ).json()  # fmt: skip

    # a: 10 hours of 1 December; b: 5 hours (19:00 to midnight); c: all 24 hours. Open
    # now: b; ended within the day: a (c ended the next day).
    assert body["totals"] == [
        {"account": world.account.pk, "account_name": "acme", "currency": "EUR",
         "cost": "39.00", "open": 1, "ended": 1},
    ]  # fmt: skip
    assert (body["since"], body["until"]) == (DAY_START, NEXT_DAY)


def test_a_summary_whose_until_is_not_after_since_is_refused(api: APIClient, world: World) -> None:
    response = api.get("/api/v1/leaks/summary/", {"since": NEXT_DAY, "until": DAY_START})

    assert (response.status_code, list(response.json()["fields"])) == (400, ["until"])


@pytest.mark.parametrize("name", ["since", "until"])
def test_a_summary_bound_with_a_nul_is_refused(api: APIClient, world: World, name: str) -> None:
    query = {"since": DAY_START, "until": NEXT_DAY}
    query[name] += "\x00"

    response = api.get("/api/v1/leaks/summary/", query)

    assert (response.status_code, list(response.json()["fields"])) == (400, [name])


def test_leaks_are_those_of_the_callers_accounts(world: World) -> None:
    _leaks(world)
    theirs = world_make(AccountFactory(name="other"))
    Leak.objects.create(
        account=theirs.account, location=theirs.zrh, currency="CHF", monthly_price=D("1460"),
        kind=Leak.Kind.VGPU, external_id="theirs", name="x", billed_since=DECEMBER,
        leaked_since=DECEMBER,
    )  # fmt: skip
    viewer = UserFactory()
    MembershipFactory(user=viewer, account=theirs.account, role="viewer")
    api = APIClient()
    api.force_login(viewer)

    listed = api.get("/api/v1/leaks/").json()["results"]
    summary = api.get("/api/v1/leaks/summary/", {"since": DAY_START}).json()["totals"]
    not_theirs = api.get(f"/api/v1/leaks/{Leak.objects.get(external_id='a').pk}/")
    months = api.get("/api/v1/costs/month/").json()

    assert [row["external_id"] for row in listed] == ["theirs"]
    assert [(t["account_name"], t["currency"], t["open"]) for t in summary] == [("other", "CHF", 1)]
    assert not_theirs.status_code == 404
    assert {row["account_name"] for row in months} == {"other"}


# CSV.


@pytest.mark.usefixtures("hours_kept_long")
@pytest.mark.parametrize(
    ("url", "params"),
    [
        ("/api/v1/costs/", {"group_by": "namespace"}),
        ("/api/v1/costs/", {"group_by": "pool", "start": DAY_START, "end": NEXT_DAY}),
        ("/api/v1/costs/month/", {"group_by": "cluster"}),
        ("/api/v1/leaks/", {"open": "false"}),
    ],
)
def test_csv_holds_the_same_rows_as_json(
    api: APIClient, world: World, url: str, params: dict[str, str]
) -> None:
    _three_hours(world)
    _leaks(world)

    answer = api.get(url, params).json()
    rows = answer if isinstance(answer, list) else answer["results"]
    as_csv = _csv(api, url, {**params, "format": "csv"})
    by_accept = _csv(api, url, params, HTTP_ACCEPT="text/csv")

    assert rows and as_csv == _as_cells(rows)
    assert by_accept == as_csv


def test_csv_has_its_header_when_there_is_no_row_and_guards_formulas(
    api: APIClient, world: World
) -> None:
    _leaks(world)

    empty = api.get("/api/v1/leaks/", {"kind": "vm", "open": "true", "format": "csv"})
    opened = _csv(api, "/api/v1/leaks/", {"open": "true", "format": "csv"})

    assert empty.content.decode().splitlines()[0].startswith("id,account,account_name,")
    assert len(empty.content.decode().splitlines()) == 1
    assert empty["Content-Disposition"] == 'attachment; filename="leaks.csv"'
    # A name a spreadsheet would run is quoted as text; numbers stay numbers.
    assert opened[0]["name"] == '\'=HYPERLINK("x")'


def test_csv_is_every_leak_not_a_page(api: APIClient, world: World) -> None:
    _leaks(world)

    paged = api.get("/api/v1/leaks/", {"limit": 1}).json()
    every = _csv(api, "/api/v1/leaks/", {"format": "csv", "limit": 1})

    assert (len(paged["results"]), paged["next"] is not None) == (1, True)
    assert [row["external_id"] for row in every] == ["a", "b", "900"]
    bad_limit = api.get("/api/v1/leaks/", {"format": "csv", "limit": "many"})
    assert (bad_limit.status_code, list(bad_limit.json()["fields"])) == (400, ["limit"])


def test_one_leak_is_one_csv_row_and_the_summary_is_json_only(api: APIClient, world: World) -> None:
    leak = _leaks(world)["a"]

    one = api.get(f"/api/v1/leaks/{leak.pk}/").json()
    as_csv = _csv(api, f"/api/v1/leaks/{leak.pk}/", {"format": "csv"})
    summary = api.get("/api/v1/leaks/summary/", {"format": "csv"})

    assert as_csv == _as_cells([one])
    assert (summary.status_code, list(summary.json()["fields"])) == (400, ["format"])


def test_errors_stay_json_when_csv_is_asked_and_an_unknown_format_is_refused(
    api: APIClient, world: World
) -> None:
    refused = api.get("/api/v1/costs/", {"group_by": "machine", "format": "csv"})
    unknown = api.get("/api/v1/costs/", {"format": "xlsx"})

    assert (refused.status_code, refused["Content-Type"]) == (400, "application/json")
    assert list(refused.json()["fields"]) == ["group_by"]
    assert (unknown.status_code, list(unknown.json()["fields"])) == (400, ["format"])


# Cost by label.


def test_cost_by_label_answers_the_rows_of_the_split_as_json_and_as_csv(
    api: APIClient, world: World
) -> None:
    labelled(world)
    url = f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/"

    answer = api.get(url, {"key": "team"}).json()
    download = api.get(url, {"key": "team", "format": "csv"})

    assert answer["key"] == "team"
    assert [(r["currency"], r["value"], r["name"], r["idle"], r["gpus"], r["vgpu"])
            for r in answer["results"]] == [
        ("CHF", "ml", "ml", False, 1, "2.0000"),
        ("EUR", "ml", "ml", False, 1, "1.0000"),
        ("EUR", "vision", "vision", False, 2, "2.0000"),
        ("EUR", None, "(no label)", False, 1, "1.0000"),
        ("EUR", None, "(idle)", True, 1, "1.0000"),
    ]  # fmt: skip
    assert download["Content-Disposition"] == 'attachment; filename="cost-by-label.csv"'
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    # The same rows, a null as an empty cell.
    assert rows == [
        {name: "" if value is None else str(value).lower() if isinstance(value, bool)
         else str(value) for name, value in row.items()}
        for row in answer["results"]
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({}, "Give a label key, e.g. team or example.com/team."),
        ({"key": ""}, "Give a label key, e.g. team or example.com/team."),
        ({"key": "team!"}, "'team!' is not a label key: its name must be 1 to 63 letters"),
        ({"key": "Team.io/x"}, "its prefix before '/' must be a DNS subdomain"),
        ({"key": "x" * 318}, "A label key has at most 317 characters, not 318."),
    ],
)
def test_cost_by_label_refuses_a_key_that_is_not_a_label_key_naming_it(
    api: APIClient, world: World, query: dict[str, str], problem: str
) -> None:
    url = f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/"

    for answer in (api.get(url, query), api.get(url, {**query, "format": "csv"})):
        assert (answer.status_code, answer["Content-Type"]) == (400, "application/json")
        (said,) = answer.json()["fields"]["key"]
        assert problem in said, said


def test_cost_by_label_of_a_cluster_the_user_does_not_see_is_404(world: World) -> None:
    theirs = world_make(AccountFactory(name="other"))
    viewer = UserFactory()
    MembershipFactory(user=viewer, account=theirs.account, role="viewer")
    api = APIClient()
    api.force_login(viewer)

    ours = api.get(f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/", {"key": "team"})
    mine = api.get(f"/api/v1/clusters/{theirs.cluster.pk}/cost-by-label/", {"key": "team"})

    assert ours.status_code == 404
    assert mine.status_code == 200
    assert {row["name"] for row in mine.json()["results"]} == {"(no label)", "(idle)"}


@pytest.mark.usefixtures("hours_kept_long")
def test_cost_by_label_over_a_window_answers_the_functions_rows_as_json_and_csv(
    api: APIClient, world: World
) -> None:
    labelled(world)
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(hours=1))
    url = f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/"
    window = {"key": "team", "start": DAY_START, "end": NEXT_DAY}

    answer = api.get(url, window).json()
    download = api.get(url, {**window, "format": "csv"})

    assert _figures(answer, "key", "start", "end", "hours", "hours_sampled") == (
        "team", DAY_START, NEXT_DAY, 24, 2,
    )  # fmt: skip
    assert [_figures(r, "currency", "name", "idle", "not_attributed", "gpu_hours", "cost")
            for r in answer["results"]] == [
        ("CHF", "ml", False, False, 2, "4.0000"),
        ("CHF", "(not attributed)", False, True, None, "0.3200"),
        ("EUR", "ml", False, False, 2, "2.0000"),
        ("EUR", "vision", False, False, 4, "4.0000"),
        ("EUR", "(no label)", False, False, 2, "2.0000"),
        ("EUR", "(idle)", True, False, 2, "2.0000"),
        ("EUR", "(not attributed)", False, True, None, "3.0400"),
    ]  # fmt: skip
    # Per currency the rows add up to what the cluster cost over the window.
    series = api.get(
        "/api/v1/costs/",
        {"group_by": "cluster", "start": DAY_START, "end": NEXT_DAY, "account": world.account.pk},
    ).json()["results"]
    for currency in ("CHF", "EUR"):
        assert sum(D(r["cost"]) for r in answer["results"] if r["currency"] == currency) == sum(
            D(p["total"]) for p in series
            if p["currency"] == currency and p["cluster"] == world.cluster.pk
        )  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    assert rows == [
        {name: "" if value is None else str(value).lower() if isinstance(value, bool)
         else str(value) for name, value in row.items()}
        for row in answer["results"]
    ]  # fmt: skip
    # `end` left out: the end of the step now running, as the costs' series.
    assert api.get(url, {"key": "team", "start": DAY_START}).json()["end"] == _iso(
        day_of(timezone.now()) + timedelta(days=1)
    )
    # A window the pages offer: its start and end.
    picked = preset("30d", "day", timezone.now())
    assert (
        api.get(url, {"key": "team", "window": "30d"}).json()
        == api.get(
            url, {"key": "team", "start": _iso(picked.start), "end": _iso(picked.end)}
        ).json()
    )


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.usefixtures("hours_kept_long")
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"key": "team", "end": NEXT_DAY}, "start"),
        ({"key": "team", "step": "hour"}, "start"),
        ({"key": "team", "start": "2026-12-01T10:30:00Z", "step": "hour"}, "start"),
        ({"key": "team", "start": "2026-12-01T10:00:00Z"}, "start"),  # by the day: midnight
        ({"key": "team", "start": NEXT_DAY, "end": DAY_START}, "end"),
        ({"key": "team", "start": DAY_START, "step": "week"}, "step"),
        ({"key": "team", "start": "yesterday"}, "start"),
        ({"key": "Team!", "start": DAY_START, "end": NEXT_DAY}, "key"),
    ],
)
def test_cost_by_label_refuses_a_bad_window_naming_the_parameter(
    api: APIClient, world: World, query: dict[str, str], field: str
) -> None:
    url = f"/api/v1/clusters/{world.cluster.pk}/cost-by-label/"

    for answer in (api.get(url, query), api.get(url, {**query, "format": "csv"})):
        assert (answer.status_code, answer["Content-Type"]) == (400, "application/json")
        assert list(answer.json()["fields"]) == [field]


# The schema.


def test_the_schema_documents_every_parameter_and_both_formats(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    validate(schema)

    def parameters(path: str) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in schema["paths"][path]["get"]["parameters"]}

    costs = parameters("/api/v1/costs/")
    assert {"group_by", "window", "start", "end", "step", "format", "account", "location"} <= set(
        costs
    )
    assert sorted(costs["window"]["schema"]["enum"]) == sorted(PRESETS)
    assert costs["step"]["schema"]["enum"] == ["day", "hour", "month"]
    assert costs["start"]["schema"]["format"] == "date-time"
    assert all(costs[name].get("description") for name in ("start", "end", "step", "format"))
    answers = schema["paths"]["/api/v1/costs/"]["get"]["responses"]
    assert set(answers["200"]["content"]) == {"application/json", "text/csv"}
    assert set(answers["400"]["content"]) == {"application/json"}
    assert {"since", "until"} <= set(parameters("/api/v1/leaks/summary/"))
    by_label = parameters("/api/v1/clusters/{id}/cost-by-label/")
    assert set(by_label) == {"id", "key", "window", "start", "end", "step", "format"}
    assert by_label["key"]["required"]
    assert by_label["key"]["schema"]["pattern"] == LABEL_KEY_PATTERN
    assert {"open", "kind", "account", "location", "cursor", "format"} <= set(
        parameters("/api/v1/leaks/")
    )
