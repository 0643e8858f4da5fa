"""The overview: capacity per location and type, what is billed for nothing and what it
cost, how fresh each location's observation is, failed machines; each linking to the list
behind it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from gpus.models import VgpuReservation
from tests.dashboard.conftest import World
from tests.factories import VgpuReservationFactory

pytestmark = pytest.mark.django_db


def test_capacity_board_counts_cards_and_instances_per_location_and_type(
    admin_client: Client, world: World
) -> None:
    board = {
        (row.location.name, row.gpu_type): row for row in admin_client.get("/").context["board"]
    }
    a100 = board["nl-fresh-dc01", "NVIDIA A100"]
    # 5 free as listed; 2 attached to the machines; the orphan and the reservation not
    # ours are billed on no VM; the released one counts for nothing.
    assert (a100.cards, a100.free, a100.attached, a100.reserved) == (1, 5, 2, 2)
    assert a100.total == 9
    assert a100.most_on_one_card == 5
    t4 = board["be-stale-dc02", "NVIDIA T4"]
    assert (t4.cards, t4.free, t4.total) == (1, 2, 2)


def test_capacity_figures_link_to_the_reservations_behind_them(
    admin_client: Client, world: World
) -> None:
    html = admin_client.get("/").content.decode()
    link = f"/reservations/?location={world.fresh.pk}&amp;type=NVIDIA+A100&amp;state=attached"
    assert link in html
    listed = admin_client.get(link.replace("&amp;", "&")).context["rows"]
    assert {row.reservation for row in listed} == set(world.attached)


def test_money_billed_for_nothing_with_its_cost_per_hour_and_since(
    admin_client: Client, world: World
) -> None:
    waste = {kind.key: kind for kind in admin_client.get("/").context["waste"]}
    # 1.00 EUR per vGPU and hour at nl-fresh-dc01.
    unassigned = waste["unassigned"]
    assert unassigned.count == 2  # the orphan (3 h unassigned) and the one not ours (1 h)
    (total,) = unassigned.totals
    assert (total.currency, total.hourly_cost, total.accrued_cost) == (
        "EUR", Decimal("2.00"), Decimal("4.00"),
    )  # fmt: skip
    assert unassigned.oldest == world.orphan.unassigned_since
    orphans = waste["orphans"]
    assert orphans.count == 1 and orphans.totals[0].accrued_cost == Decimal("2.00")
    assert orphans.oldest == world.orphan.orphaned_since
    leaks = waste["leaks"]
    assert leaks.count == 1 and leaks.totals[0].accrued_cost == Decimal("1.00")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("unassigned", {"orphan", "leak"}), ("orphans", {"orphan"}), ("leaks", {"leak"})],
)
def test_each_money_figure_links_to_the_list_of_its_reservations(
    admin_client: Client, world: World, kind: str, expected: set[str]
) -> None:
    waste = {k.key: k for k in admin_client.get("/").context["waste"]}
    response = admin_client.get("/reservations/" + waste[kind].link())
    listed = {row.reservation for row in response.context["rows"]}
    assert listed == {getattr(world, name) for name in expected}


def test_a_released_reservation_costs_nothing_any_more(admin_client: Client, world: World) -> None:
    VgpuReservation.objects.filter(pk=world.leak.pk).update(state=VgpuReservation.State.RELEASED)
    waste = {kind.key: kind for kind in admin_client.get("/").context["waste"]}
    assert waste["leaks"].count == 0 and waste["leaks"].totals == []
    assert waste["unassigned"].count == 1


def test_costs_are_summed_per_currency(admin_client: Client, world: World) -> None:
    VgpuReservationFactory(
        orphaned=True, location=world.stale, name="capvco-prod-x-1-gpu-0", gpu_id="card-t4"
    )
    world.stale.currency = "USD"
    world.stale.save()
    waste = {kind.key: kind for kind in admin_client.get("/").context["waste"]}
    assert [t.currency for t in waste["orphans"].totals] == ["EUR", "USD"]


def test_a_location_not_observed_completely_for_two_intervals_is_stale(
    admin_client: Client, world: World
) -> None:
    response = admin_client.get("/")
    stale = {o.location.name: o.stale for o in response.context["observations"]}
    assert stale == {"be-stale-dc02": True, "nl-fresh-dc01": False}
    assert "stale</strong>" in response.content.decode()


def test_failed_machines_show_with_their_message_and_cluster(
    admin_client: Client, world: World
) -> None:
    response = admin_client.get("/")
    assert response.context["failed"] == [world.failed]
    html = response.content.decode()
    assert "image 42 is gone" in html
    assert f"/clusters/{world.cluster.pk}/#machine-{world.failed.pk}" in html
