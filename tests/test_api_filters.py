"""One filter language on every list of the API, walked from its own schema (a new list is
walked as soon as it is routed): a parameter no operation takes is refused (400) naming
it, and each documented filter answers 200 and narrows the list (two of everything, the
filter picks one side)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import resolve
from django.utils import timezone
from rest_framework.test import APIClient

from cloud.models import VirtualMachine
from tests.factories import VgpuReservationFactory
from tests.filter_world import World, two_of_everything, value_for

pytestmark = pytest.mark.django_db

PAGING = {"limit", "offset", "cursor"}
# What every list that downloads takes besides its filters: how it answers, not what.
NOT_FILTERS = PAGING | {"format"}


def _lists() -> list[tuple[str, list[str]]]:
    """Every GET of the schema without a path parameter, with its query parameters."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (path, [p["name"] for p in item["get"].get("parameters", []) if p["in"] == "query"])
        for path, item in schema["paths"].items()
        if "get" in item and "{" not in path
    ]


def _not_filters(path: str) -> set[str]:
    """What a view reads besides its filters (`group_by` of the costs): not a narrowing."""
    return set(getattr(resolve(path).func.cls, "query_parameters", ()))  # type: ignore[attr-defined]


def _id_filters() -> list[tuple[str, str]]:
    """Every list's filters that take an id (integers, paging aside)."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (path, parameter["name"])
        for path, item in schema["paths"].items()
        if "get" in item and "{" not in path
        for parameter in item["get"].get("parameters", [])
        if parameter["in"] == "query"
        and parameter["schema"].get("type") == "integer"
        and parameter["name"] not in PAGING
    ]


LISTS = _lists()
ID_FILTERS = _id_filters()
FILTERS = [
    (path, name)
    for path, names in LISTS
    for name in names
    if name not in NOT_FILTERS | _not_filters(path)
]


def _results(body: Any) -> list[str]:
    rows = body["results"] if isinstance(body, dict) else body
    return [json.dumps(row, sort_keys=True) for row in rows]


@pytest.fixture
def world() -> World:
    return two_of_everything()


def test_the_walk_sees_the_lists_and_their_filters() -> None:
    paths = {path for path, _ in LISTS}
    assert {"/api/v1/machines/", "/api/v1/reservations/", "/api/v1/sriov/queues/"} <= paths
    assert ("/api/v1/machines/", "cluster") in FILTERS
    assert ("/api/v1/machines/", "cluster__name") in FILTERS


@pytest.mark.parametrize("path", [path for path, _ in LISTS])
def test_an_unknown_parameter_is_refused_naming_it(api: APIClient, path: str) -> None:
    response = api.get(path, {"clustr": "prod"})

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert body["unknown_parameters"] == ["clustr"]
    assert "clustr" in body["fields"] and "clustr" in body["detail"]
    documented = dict(LISTS)[path]
    assert set(documented) <= set(body["allowed"])


@pytest.mark.parametrize(("path", "name"), FILTERS, ids=[f"{p}?{n}" for p, n in FILTERS])
def test_each_documented_filter_narrows_its_list(
    api: APIClient, world: World, path: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = resolve(path).func
    filterset = getattr(view.cls, "filterset_class", None)  # type: ignore[attr-defined]
    assert filterset is not None, f"{path} documents {name} but has no FilterSet"
    value = value_for(world, filterset._meta.model, name)
    # An open leak or idle spell costs more by the moment: both answers at one moment.
    moment = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: moment)

    everything = api.get(path)
    picked = api.get(path, {name: value})

    assert everything.status_code == picked.status_code == 200, picked.content
    listed, narrowed = _results(everything.json()), _results(picked.json())
    assert 0 < len(narrowed) < len(listed), f"{name}={value}: {narrowed}"
    assert set(narrowed) <= set(listed)


# Past the 64 bits of a database's integer, either way; the first is the one a fuzzer sent.
PAST_64_BITS = ["314023754457144229888", str(2**63), str(-(2**63) - 1), "1" + "0" * 40]


@pytest.mark.parametrize(("path", "name"), ID_FILTERS, ids=[f"{p}?{n}" for p, n in ID_FILTERS])
def test_an_id_past_64_bits_matches_what_an_id_no_row_has_matches(
    api: APIClient, world: World, path: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL and on SQLite (the embedded default) alike: SQLite cannot even take
    such a number as a parameter (tests/test_api_embedded.py runs this there)."""
    moment = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: moment)
    nothing = api.get(path, {name: "2147483647"})
    assert nothing.status_code == 200, nothing.content

    for past in PAST_64_BITS:
        answer = api.get(path, {name: past})

        assert answer.status_code == 200, f"{name}={past}: {answer.content!r}"
        assert _results(answer.json()) == _results(nothing.json()), f"{name}={past}"


@pytest.mark.parametrize(
    "path", ["/api/v1/machines/", "/api/v1/nodes/", "/api/v1/reservations/", "/api/v1/pools/"]
)
def test_a_cluster_is_an_id_and_a_name_is_its_own_filter(
    api: APIClient, world: World, path: str
) -> None:
    cluster = world.first.related["cluster"]

    by_id = api.get(path, {"cluster": cluster.pk}).json()["results"]
    by_name = api.get(path, {"cluster__name": cluster.name}).json()["results"]  # type: ignore[attr-defined]
    a_name_as_id = api.get(path, {"cluster": cluster.name})  # type: ignore[attr-defined]

    assert len(by_id) == 1 and by_id == by_name
    assert a_name_as_id.status_code == 400
    assert a_name_as_id.json()["fields"] == {"cluster": ["Give an id (a whole number)."]}


def test_a_location_by_name_lists_its_reservations(api: APIClient, world: World) -> None:
    location = world.first.related["location"]

    response = api.get("/api/v1/reservations/", {"location__name": location.name})  # type: ignore[attr-defined]

    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [world.first.rows["reservation"].pk]


def test_a_vm_is_found_by_its_whitesky_id(api: APIClient, world: World) -> None:
    vm = VirtualMachine.objects.get(name="bastion-a")

    found = api.get("/api/v1/vms/", {"vm_id": vm.vm_id})
    none = api.get("/api/v1/vms/", {"vm_id": 10**12})
    not_an_id = api.get("/api/v1/vms/", {"vm_id": "capvco-gone-a"})

    assert found.status_code == 200, found.content
    assert [row["vm_id"] for row in found.json()["results"]] == [vm.vm_id]
    assert none.status_code == 200 and none.json()["results"] == []
    assert not_an_id.status_code == 400
    assert not_an_id.json()["fields"] == {"vm_id": ["Give an id (a whole number)."]}


@pytest.mark.parametrize(
    ("method", "path"),
    [("trace", "/api/v1/clusters/"), ("put", "/api/v1/clusters/"), ("post", "/api/v1/vms/")],
)
def test_a_method_an_endpoint_does_not_take_is_405_whatever_its_parameters(
    api: APIClient, method: str, path: str
) -> None:
    response = getattr(api, method)(f"{path}?clustr=prod&limit=x")

    assert response.status_code == 405, response.content
    assert response.json()["code"] == "method_not_allowed"


def test_paging_and_format_are_known_parameters(api: APIClient, world: World) -> None:
    offset_paged = api.get("/api/v1/pools/", {"limit": 1, "offset": 1, "format": "json"})
    first = api.get("/api/v1/machines/", {"limit": 1, "format": "json"})
    cursor = first.json()["next"].split("cursor=")[1].split("&")[0]
    cursor_paged = api.get("/api/v1/machines/", {"limit": 1, "cursor": cursor, "format": "json"})

    assert offset_paged.status_code == 200
    assert len(offset_paged.json()["results"]) == 1
    assert cursor_paged.status_code == 200
    assert len(cursor_paged.json()["results"]) == 1


def test_a_detail_takes_no_filter(api: APIClient, world: World) -> None:
    machine = world.first.related["machine"]

    response = api.get(f"/api/v1/machines/{machine.pk}/", {"cluster": 1})

    assert response.status_code == 400
    assert response.json()["unknown_parameters"] == ["cluster"]
    assert response.json()["allowed"] == ["format"]


def test_an_unknown_parameter_without_credentials_is_still_401() -> None:
    response = APIClient().get("/api/v1/machines/", {"clustr": "prod"})

    assert response.status_code == 401


def test_the_schema_documents_the_refusal_of_unknown_parameters() -> None:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    error = schema["components"]["schemas"]["Error"]["properties"]
    assert {"unknown_parameters", "allowed"} <= set(error)
    listing = schema["paths"]["/api/v1/machines/"]["get"]
    assert "unknown_parameters" in listing["responses"]["400"]["description"]
    cluster = next(p for p in listing["parameters"] if p["name"] == "cluster")
    assert cluster["schema"]["type"] == "integer"
    by_name = next(p for p in listing["parameters"] if p["name"] == "cluster__name")
    assert by_name["schema"]["type"] == "string"


def test_a_reservation_no_machine_owns_is_its_named_clusters_in_its_account(
    api: APIClient, world: World
) -> None:
    cluster = world.first.related["cluster"]
    ours = VgpuReservationFactory(
        orphaned=True,
        location=world.first.related["location"],
        owner_cluster=cluster.name,  # type: ignore[attr-defined]
    )
    # The same cluster name in another account is another cluster.
    VgpuReservationFactory(
        orphaned=True,
        location=world.second.related["location"],
        owner_cluster=cluster.name,  # type: ignore[attr-defined]
    )

    response = api.get("/api/v1/reservations/", {"cluster": cluster.pk})

    assert {row["id"] for row in response.json()["results"]} == {
        world.first.rows["reservation"].pk,
        ours.pk,
    }
