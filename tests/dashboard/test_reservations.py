"""The reservations list: the API's filters, keyset pages in either order, the bounded
search, and a CSV export of everything the filters select."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from dashboard.views.reservations import PAGE_SIZE
from gpus.models import VgpuReservation
from tests.dashboard.conftest import World
from tests.factories import VgpuReservationFactory

pytestmark = pytest.mark.django_db
State = VgpuReservation.State


def listed(client: Client, query: str = "") -> list[VgpuReservation]:
    response = client.get(f"/reservations/?{query}")
    assert response.status_code == 200, response.content
    return [row.reservation for row in response.context["rows"]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=attached", {"attached"}),
        ("orphaned=true", {"orphan", "leak"}),
        ("orphaned=false", {"attached", "released"}),
        ("unassigned=true", {"orphan", "leak"}),
        ("not_ours=true", {"leak"}),
        ("not_ours=false", {"attached", "orphan", "released"}),
        ("cluster__name=prod", {"attached", "orphan"}),  # the owner read from the name
        ("type=nvidia+a100", {"attached", "orphan", "leak"}),
        ("q=prod-gpu-9", {"orphan"}),
        ("q=ELSES", {"leak"}),
    ],
)
def test_filters_select_the_rows_they_name(
    admin_client: Client, world: World, query: str, expected: set[str]
) -> None:
    rows = set(listed(admin_client, query))
    want: set[Any] = set()
    for name in expected:
        value = getattr(world, name)
        want |= set(value) if isinstance(value, list) else {value}
    assert rows == want


def test_the_form_sent_with_every_field_left_at_any_lists_everything(
    admin_client: Client, world: World
) -> None:
    # A GET form sends its empty fields too; the API's filters refuse an empty value.
    empty = "location=&type=&state=&cluster=&orphaned=&unassigned=&not_ours=&vm_id=&q="
    assert set(listed(admin_client, f"{empty}&sort=-created")) == set(listed(admin_client))
    page = admin_client.get("/reservations/").content.decode()
    assert '<option value="true">yes</option>' in page  # orphaned and friends: a choice


def test_location_filter_and_vm_filter(admin_client: Client, world: World) -> None:
    assert listed(admin_client, f"location={world.stale.pk}") == []
    vm = world.machines[1].vm_id
    assert listed(admin_client, f"location={world.fresh.pk}&vm_id={vm}") == [world.attached[1]]


def test_a_search_shorter_than_three_characters_is_refused_saying_so(
    admin_client: Client, world: World
) -> None:
    response = admin_client.get("/reservations/?q=gp")
    assert response.status_code == 400
    assert "at least 3 characters" in response.content.decode()


def test_an_unknown_location_or_sort_is_a_clear_error(admin_client: Client, world: World) -> None:
    response = admin_client.get("/reservations/?location=999999")
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    response = admin_client.get("/reservations/?sort=cost")
    assert response.status_code == 400
    assert "Unknown sort" in response.content.decode()


def test_a_page_link_we_did_not_make_is_refused(admin_client: Client, world: World) -> None:
    response = admin_client.get("/reservations/?after=not-a-cursor")
    assert response.status_code == 400
    assert "page link is not valid" in response.content.decode()


@pytest.fixture
def many(world: World) -> list[VgpuReservation]:
    """120 more released reservations: three pages with the world's five."""
    rows = [
        VgpuReservationFactory(
            machine=None,
            location=world.fresh,
            name=f"capvco-prod-old-{i:03d}-gpu-0",
            state=State.RELEASED,
        )
        for i in range(120)
    ]
    return rows


def _walk(client: Client, query: str) -> tuple[list[int], dict[str, Any]]:
    """Follow the `next` links from the first page to the last; the ids in order."""
    seen: list[int] = []
    response = client.get(f"/reservations/?{query}")
    while True:
        page = response.context["page"]
        seen += [r.pk for r in page.rows]
        if not page.has_next:
            return seen, response.context
        response = client.get(f"/reservations/?{query}&after={page.next_cursor}")


@pytest.mark.parametrize(
    ("sort", "key"),
    [
        ("-created", lambda r: (r.created_at, r.pk)),
        ("created", lambda r: (r.created_at, r.pk)),
        ("name", lambda r: (r.name, r.pk)),
        ("-name", lambda r: (r.name, r.pk)),
    ],
)
def test_next_links_walk_every_row_once_in_order(
    admin_client: Client, many: list[VgpuReservation], sort: str, key: Any
) -> None:
    seen, _ = _walk(admin_client, f"sort={sort}")
    rows = {r.pk: r for r in VgpuReservation.objects.all()}
    expected = sorted(rows.values(), key=key, reverse=sort.startswith("-"))
    assert seen == [r.pk for r in expected]
    assert len(seen) == 125


def test_last_and_previous_pages_mirror_the_next_links(
    admin_client: Client, many: list[VgpuReservation]
) -> None:
    seen, _ = _walk(admin_client, "sort=name")
    last = admin_client.get("/reservations/?sort=name&last=1").context["page"]
    assert [r.pk for r in last.rows] == seen[-PAGE_SIZE:]
    assert last.has_previous and not last.has_next
    before = admin_client.get(f"/reservations/?sort=name&before={last.previous_cursor}")
    middle = before.context["page"]
    assert [r.pk for r in middle.rows] == seen[-2 * PAGE_SIZE : -PAGE_SIZE]
    assert middle.has_previous and middle.has_next
    first = admin_client.get(f"/reservations/?sort=name&before={middle.previous_cursor}")
    assert [r.pk for r in first.context["page"].rows] == seen[: len(seen) - 2 * PAGE_SIZE]
    assert not first.context["page"].has_previous


def test_pages_keep_the_filters(admin_client: Client, many: list[VgpuReservation]) -> None:
    seen, context = _walk(admin_client, "state=released&sort=name")
    assert len(seen) == 121
    assert context["page"].count == 121
    html = admin_client.get("/reservations/?state=released&sort=name").content.decode()
    assert "state=released&amp;sort=name&amp;after=" in html


def test_csv_export_has_every_filtered_row_with_its_cost(
    admin_client: Client, world: World
) -> None:
    response = admin_client.get("/reservations/csv/?orphaned=true")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    rows = list(csv.DictReader(io.StringIO(body)))
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == {world.orphan.name, world.leak.name}
    orphan = by_name[world.orphan.name]
    assert orphan["location"] == "nl-fresh-dc01"
    assert orphan["gpu_type"] == "NVIDIA A100"
    assert orphan["state"] == "reserved"
    assert orphan["cluster"] == "prod" and orphan["machine"] == "gpu-9"
    assert orphan["currency"] == "EUR"
    assert Decimal(orphan["cost_per_hour"]) == Decimal("1.0000")
    assert Decimal(orphan["accrued_cost"]) == Decimal("2.00")


def test_csv_export_is_not_limited_to_a_page(
    admin_client: Client, many: list[VgpuReservation]
) -> None:
    response = admin_client.get("/reservations/csv/?state=released")
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    assert len(list(csv.DictReader(io.StringIO(body)))) == 121


def test_csv_export_defuses_spreadsheet_formulas_in_names(
    admin_client: Client, world: World
) -> None:
    VgpuReservationFactory(orphaned=True, location=world.fresh, name="=HYPERLINK(1)")
    response = admin_client.get("/reservations/csv/?not_ours=true")
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    names = {row["name"] for row in csv.DictReader(io.StringIO(body))}
    assert "'=HYPERLINK(1)" in names


def test_csv_export_refuses_bad_filters_saying_why(admin_client: Client, world: World) -> None:
    response = admin_client.get("/reservations/csv/?q=x")
    assert response.status_code == 400
    assert b"at least 3 characters" in response.content


def test_the_api_takes_the_same_new_filters(admin_client: Client, world: World) -> None:
    response = admin_client.get(
        "/api/v1/reservations/?not_ours=true&unassigned=true", HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 200
    assert [r["name"] for r in response.json()["results"]] == [world.leak.name]
    refused = admin_client.get("/api/v1/reservations/?q=ab", HTTP_ACCEPT="application/json")
    assert refused.status_code == 400


def test_a_large_count_says_more_than_instead_of_counting_every_row(
    admin_client: Client, world: World
) -> None:
    VgpuReservation.objects.bulk_create(
        VgpuReservation(location=world.fresh, name=f"x-{i}", vgpu_id=f"x-{i}", state=State.RELEASED)
        for i in range(600)
    )
    response = admin_client.get("/reservations/?state=released")
    assert response.context["page"].count_capped
    assert "more than 500</strong> reservations" in response.content.decode()
