"""The vGPU list pages by `limit` (default 25, 0 = all) and `start_after` (an offset)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.simulator.support import CS_NL, Api, demo_world
from tests.whitesky_sim import WhiteskySimulator

RESERVATIONS = 60


@pytest.fixture
def api_with_60(whitesky_sim: WhiteskySimulator) -> Api:
    world = demo_world()
    world["locations"][0]["gpu_cards"] = [
        {"vendor": "NVIDIA", "model": "A100", "cards": 1, "instances_per_card": 100}
    ]
    whitesky_sim.reset(world)
    whitesky_sim.seed(CS_NL, vgpus=RESERVATIONS)
    return Api(whitesky_sim)


def _ids(page: dict[str, Any]) -> list[str]:
    return [item["vgpu_id"] for item in page["data"]]


def test_default_page_is_25_with_count_and_pages(api_with_60: Api) -> None:
    page = api_with_60.vgpus()

    assert page["pagination"] == {"limit": 25, "pages": 3, "count": RESERVATIONS}
    assert len(page["data"]) == 25


def test_start_after_is_an_offset_and_the_pages_cover_everything_once(api_with_60: Api) -> None:
    pages = [api_with_60.vgpus(limit=25, start_after=offset) for offset in (0, 25, 50)]

    ids = [vgpu_id for page in pages for vgpu_id in _ids(page)]
    assert [len(page["data"]) for page in pages] == [25, 25, 10]
    assert len(ids) == len(set(ids)) == RESERVATIONS
    assert ids == [f"vgpu-{n:06d}" for n in range(1, RESERVATIONS + 1)]


def test_limit_zero_answers_everything_in_one_page(api_with_60: Api) -> None:
    page = api_with_60.vgpus(limit=0)

    assert page["pagination"] == {"limit": 0, "pages": 1, "count": RESERVATIONS}
    assert len(page["data"]) == RESERVATIONS


def test_a_page_past_the_end_is_empty_but_still_counts(api_with_60: Api) -> None:
    page = api_with_60.vgpus(limit=25, start_after=100)

    assert page["data"] == []
    assert page["pagination"]["count"] == RESERVATIONS


def test_pages_round_up(api_with_60: Api) -> None:
    assert api_with_60.vgpus(limit=7)["pagination"]["pages"] == 9
    assert api_with_60.vgpus(limit=60)["pagination"]["pages"] == 1
    assert api_with_60.vgpus(limit=500)["pagination"]["pages"] == 1


def test_deleted_vgpus_are_only_listed_when_asked(api_with_60: Api) -> None:
    deleted = _ids(api_with_60.vgpus(limit=2))
    for vgpu_id in deleted:
        assert api_with_60.delete_vgpu(vgpu_id).status_code == 200

    default = api_with_60.vgpus(limit=0)
    only = api_with_60.vgpus(limit=0, only_deleted="true")
    included = api_with_60.vgpus(limit=0, include_deleted="true")

    assert default["pagination"]["count"] == RESERVATIONS - 2
    assert _ids(only) == deleted
    assert included["pagination"]["count"] == RESERVATIONS


def test_an_empty_list_has_zero_pages(api: Api) -> None:
    assert api.vgpus()["pagination"] == {"limit": 25, "pages": 0, "count": 0}


@pytest.mark.parametrize("params", [{"limit": -1}, {"start_after": -5}, {"limit": "many"}])
def test_bad_paging_parameters_are_400_naming_them(api: Api, params: dict[str, Any]) -> None:
    response = api.get("/customers/cust-demo/locations/nl-rmd-dc01-001/vgpus", **params)

    assert response.status_code == 400
    assert next(iter(params)) in response.json()["message"]
