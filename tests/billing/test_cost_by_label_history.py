"""Cost by label over a window (billing.selectors.cost_by_label_over), from the label sets
each hourly sample keeps (billing.LabelCostRollup), against figures computed by hand on
tests/billing/test_costs.py's labelled world. An hour of it: EUR ml 1 GPU 1.00, vision 2
GPUs 2.00, pods without `team` 1 GPU 1.00, idle 1 GPU 1.00, and the rest of the cluster's
6.52 EUR (vCPUs and memory 0.52, m1's reserved vGPU 1.00) 1.52; CHF ml 1 GPU 2.00 and the
rest of its 2.16 CHF (m4's vCPUs and memory) 0.16."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from billing.costs import LabelKeyInvalid, cost_by_label
from billing.models import CostRollup, LabelCostRollup, Step
from billing.rollups import rollups_take
from billing.selectors import cost_by_label_over, cost_series
from capvco_web.retention import history_prune
from cloud.models import Location
from kube.models import KubePod
from tests.billing.test_costs import World, labelled, world_make
from tests.factories import KubePodFactory

pytestmark = pytest.mark.django_db

D = Decimal
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
T0 = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)  # a Tuesday, 10:05 UTC
H0 = T0.replace(minute=0)


@pytest.fixture
def world() -> World:
    found = world_make()
    labelled(found)
    return found


def _over(key: str, world: World, start: datetime, end: datetime) -> list[tuple[Any, ...]]:
    found = cost_by_label_over(
        key, cluster=world.cluster.pk, locations=Location.objects.all(), start=start, end=end
    )
    return [(row.currency, row.name, row.gpu_hours, row.cost) for row in found.rows]


def test_a_window_sums_each_values_hours_with_idle_and_the_rest_of_the_cluster_apart(
    world: World,
) -> None:
    rollups_take(now=T0)
    # The next hour, vision's pod carries `team: ml`: each hour keeps the labels it saw.
    KubePod.objects.filter(namespace="cv").update(labels={"team": "ml"})
    rollups_take(now=T0 + HOUR)

    assert _over("team", world, H0, H0 + 2 * HOUR) == [
        ("CHF", "ml", 2, D("4.0000")),
        ("CHF", "(not attributed)", None, D("0.3200")),
        ("EUR", "ml", 4, D("4.0000")),  # 1 an hour, and vision's 2 in the second
        ("EUR", "vision", 2, D("2.0000")),
        ("EUR", "(no label)", 2, D("2.0000")),
        ("EUR", "(idle)", 2, D("2.0000")),
        ("EUR", "(not attributed)", None, D("3.0400")),
    ]
    # One hour of it: the figure now (cost_by_label) as sampled, and the rest beside it.
    now = cost_by_label("team", cluster=world.cluster, locations=Location.objects.all())
    second = _over("team", world, H0 + HOUR, H0 + 2 * HOUR)
    assert [r[:4] for r in second if r[1] != "(not attributed)"] == [
        (row.currency, row.name, row.gpus, row.vgpu) for row in now
    ]
    # Any key, asked after the hours were sampled.
    assert _over("app.kubernetes.io/name", world, H0, H0 + HOUR)[2:5] == [
        ("EUR", "trainer", 2, D("2.0000")),
        ("EUR", "(no label)", 2, D("2.0000")),
        ("EUR", "(idle)", 1, D("1.0000")),
    ]


def _namespace_split(world: World, start: datetime, end: datetime) -> dict[str, D]:
    """Per currency, the cluster's namespace rows over the window (its GPU nodes' vGPUs
    shared by namespace, and idle): what the costs API answers by namespace."""
    found: dict[str, D] = {}
    for point in cost_series(
        group_by="namespace", locations=Location.objects.all(), start=start, end=end, step="day"
    ):
        if point.cluster == world.cluster.pk:
            found[point.currency] = found.get(point.currency, D(0)) + point.vgpu
    return found


def _cluster_cost(world: World, start: datetime, end: datetime) -> dict[str, D]:
    """Per currency, what the cluster cost over the window as its money series says."""
    found: dict[str, D] = {}
    for point in cost_series(
        group_by="cluster", locations=Location.objects.all(), start=start, end=end, step="day",
        clusters=[world.cluster.pk],
    ):  # fmt: skip
        found[point.currency] = found.get(point.currency, D(0)) + point.total
    return found


def test_a_windows_rows_add_up_to_the_clusters_cost_and_split_as_its_namespaces(
    world: World,
) -> None:
    # Three hours on the 1st (summed into its day), and two on the 2nd (hours still).
    for moment in (T0, T0 + HOUR, T0 + 2 * HOUR, T0 + timedelta(days=1)):
        rollups_take(now=moment)
    rollups_take(now=T0 + timedelta(days=1, hours=1))
    start, end = H0.replace(hour=0), H0.replace(hour=0) + timedelta(days=2)
    assert LabelCostRollup.objects.filter(step=Step.DAY).exists()

    rows = cost_by_label_over(
        "team", cluster=world.cluster.pk, locations=Location.objects.all(), start=start, end=end
    ).rows
    totals: dict[str, D] = {}
    by_gpus: dict[str, D] = {}
    for row in rows:
        totals[row.currency] = totals.get(row.currency, D(0)) + row.cost
        if not row.not_attributed:
            by_gpus[row.currency] = by_gpus.get(row.currency, D(0)) + row.cost
    assert totals == _cluster_cost(world, start, end) == {"CHF": D("10.80"), "EUR": D("32.60")}
    assert by_gpus == _namespace_split(world, start, end) == {"CHF": D("10"), "EUR": D("25")}
    idle = next(row for row in rows if row.idle)
    assert (idle.gpu_hours, idle.cost) == (5, D("5"))
    # The 1st reads the same from its day rows as from its hours (a window by the hour),
    # and December from its month's rows as from its days and hours.
    assert _over("team", world, start, start + timedelta(days=1)) == _over(
        "team", world, H0, H0 + 3 * HOUR
    )
    december = _over("team", world, start, start + timedelta(days=31))
    assert december == _over("team", world, start, end)
    assert LabelCostRollup.objects.filter(step=Step.MONTH).exists()


def _queries(read: Callable[[], object]) -> int:
    """The queries `read` made, less the BEGIN and COMMIT of its snapshot."""
    with CaptureQueriesContext(connection) as queries:
        read()
    return sum(not q["sql"].startswith(("BEGIN", "COMMIT")) for q in queries.captured_queries)


# Outside a test's transaction, as a request reads it: in one snapshot of its own, which
# reads where the summed days end once.
@pytest.mark.django_db(transaction=True)
def test_a_window_is_read_in_five_queries_however_many_pods_and_hours(world: World) -> None:
    for hour in range(3):
        rollups_take(now=T0 + hour * HOUR)
    args = {"cluster": world.cluster.pk, "locations": Location.objects.all()}
    start = H0.replace(hour=0)
    assert _queries(lambda: cost_by_label_over("team", **args, start=start, end=start + DAY)) == 5
    # A hundred more GPU pods, each of a label set of its own, and a month of days.
    for n in range(100):
        KubePodFactory(
            cluster=world.cluster, node_name="node-5", gpu_requests=1, labels={"team": f"t{n}"}
        )
    for day in range(1, 30):
        rollups_take(now=T0 + day * DAY)
    month = {"start": start, "end": start + 30 * DAY}
    assert _queries(lambda: cost_by_label_over("team", **args, **month)) == 5
    found = cost_by_label_over("team", **args, **month)
    assert len({row.value for row in found.rows}) == 100 + 3  # ml, vision, t0..t99, None
    assert found.hours_sampled == 3 + 29


def test_a_key_that_is_not_a_label_key_is_refused_naming_it(world: World) -> None:
    with pytest.raises(LabelKeyInvalid, match=re.escape("'Team!' is not a label key")):
        cost_by_label_over(
            "Team!", cluster=world.cluster.pk, locations=Location.objects.all(),
            start=H0, end=H0 + HOUR,
        )  # fmt: skip


@override_settings(COST_HOURLY_HISTORY_DAYS=60, COST_HISTORY_DAYS=400)
def test_label_sets_are_kept_as_long_as_the_cost_rows_beside_them(world: World) -> None:
    rollups_take(now=T0)
    rollups_take(now=T0 + timedelta(days=1))  # sums the 1st
    kinds = (LabelCostRollup, CostRollup)

    def kept(step: str) -> list[bool]:
        return [model.objects.filter(step=step, start__lt=H0 + HOUR).exists() for model in kinds]

    history_prune(now=T0 + timedelta(days=61))
    assert (kept(Step.HOUR), kept(Step.DAY), kept(Step.MONTH)) == (
        [False, False], [True, True], [True, True],
    )  # fmt: skip
    history_prune(now=T0 + timedelta(days=401))
    assert (kept(Step.DAY), kept(Step.MONTH)) == ([False, False], [True, True])
    history_prune(now=T0 + timedelta(days=432))  # the month's last day is gone too
    assert kept(Step.MONTH) == [False, False]
