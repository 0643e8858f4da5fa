"""The API's big lists page by cursor (capvco_web.api_input.CursorPagination): every row of
a filtered list once and in id order, also while rows are added between pages; a deep page
costs the queries of the first; the count stops at a cap; a made-up cursor or an offset is
refused (400) naming it."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from capvco_web import api_input
from cloud.models import Location
from gpus.models import VgpuReservation
from tests.factories import LocationFactory, VgpuReservationFactory

pytestmark = pytest.mark.django_db

LIST = "/api/v1/reservations/"


def _reservation(location: Location) -> VgpuReservation:
    return VgpuReservationFactory(orphaned=True, location=location)  # type: ignore[no-any-return]


def _query(link: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(link).query).items()}


def _get(api: APIClient, params: dict[str, Any]) -> dict[str, Any]:
    response = api.get(LIST, params)
    assert response.status_code == 200, response.json()
    return dict(response.json())


def test_paging_a_filtered_list_gives_each_row_once_in_order_while_rows_are_added(
    api: APIClient,
) -> None:
    here, elsewhere = LocationFactory(), LocationFactory()
    ours = [_reservation(here).pk for _ in range(7)]
    for _ in range(3):
        _reservation(elsewhere)

    seen: list[int] = []
    page = _get(api, {"location": here.pk, "limit": 3})
    while True:
        seen += [row["id"] for row in page["results"]]
        # Rows added between page reads: one the filter keeps, one it does not.
        ours.append(_reservation(here).pk)
        _reservation(elsewhere)
        if page["next"] is None:
            break
        page = _get(api, _query(page["next"]))

    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    # Every row there when the walk began, and every row added before the last page read.
    assert set(ours[:7]) <= set(seen) <= set(ours)
    assert seen == [pk for pk in ours if pk in set(seen)]
    assert seen[-1] == ours[-2]  # the walk ends on the newest row added before its last read


def test_previous_links_walk_back_over_the_same_pages(api: APIClient) -> None:
    location = LocationFactory()
    for _ in range(7):
        _reservation(location)
    forward = [_get(api, {"limit": 3})]
    while forward[-1]["next"]:
        forward.append(_get(api, _query(forward[-1]["next"])))

    backward = [forward[-1]]
    while backward[-1]["previous"]:
        backward.append(_get(api, _query(backward[-1]["previous"])))

    ids = [[row["id"] for row in page["results"]] for page in forward]
    assert [len(page) for page in ids] == [3, 3, 1]
    assert [[row["id"] for row in page["results"]] for page in backward] == ids[::-1]
    assert forward[0]["previous"] is None and forward[-1]["next"] is None


def test_a_deep_page_costs_the_queries_of_the_first(api: APIClient) -> None:
    location = LocationFactory()
    for _ in range(24):
        _reservation(location)
    with CaptureQueriesContext(connection) as first_queries:
        page = _get(api, {"limit": 2})
    for _ in range(10):
        page = _get(api, _query(page["next"]))
    with CaptureQueriesContext(connection) as deep_queries:
        deep = _get(api, _query(page["next"]))

    assert len(deep["results"]) == 2
    assert len(deep_queries) == len(first_queries)
    # A range from the cursor, not an OFFSET: the database reads no row before it.
    assert not any("OFFSET" in query["sql"] for query in deep_queries.captured_queries)


def test_the_count_is_exact_up_to_the_cap_then_capped(
    api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = LocationFactory()
    for _ in range(4):
        _reservation(location)

    exact = _get(api, {"limit": 1})
    monkeypatch.setattr(api_input, "CURSOR_COUNT_CAP", 3)
    capped = _get(api, {"limit": 1})

    assert (exact["count"], exact["count_capped"]) == (4, False)
    assert (capped["count"], capped["count_capped"]) == (3, True)


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",  # no cursor is left out, not given empty
        "x",
        "n",
        "n!!not-base64!!",
        "q" + _b64('["1",1]'),  # neither way
        "n" + _b64('["1","1"]'),  # an id that is no number
        "n" + _b64('{"after":1}'),
        "p" + _b64("[1,2,3]"),
        "n" + "A" * 5000,
        "n" + _b64(f'["1",{10**30}]'),  # past any id the database holds
    ],
)
def test_a_cursor_we_did_not_make_is_refused_naming_it(api: APIClient, cursor: str) -> None:
    _reservation(LocationFactory())

    response = api.get(LIST, {"cursor": cursor})

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["cursor"]


def test_an_offset_on_a_cursor_list_is_refused_naming_it(api: APIClient) -> None:
    response = api.get(LIST, {"limit": 10, "offset": 100})

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["offset"]
    assert "cursor" in response.json()["fields"]["offset"][0]


def test_a_cursor_past_the_last_row_answers_an_empty_page_leading_back(api: APIClient) -> None:
    location = LocationFactory()
    rows = [_reservation(location) for _ in range(2)]
    page = _get(api, {"limit": 1})
    VgpuReservation.objects.filter(pk=rows[1].pk).delete()

    past = _get(api, _query(page["next"]))

    assert (past["results"], past["next"]) == ([], None)
    assert [row["id"] for row in _get(api, _query(past["previous"]))["results"]] == [rows[0].pk]
