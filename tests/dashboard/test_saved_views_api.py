"""/api/v1/saved-views/: a person's saved views through the API, checked as the page checks
them (one service: dashboard.saved_views), theirs alone."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from dashboard.models import SavedView
from tests.factories import UserFactory

URL = "/api/v1/saved-views/"


def client_of(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(UserFactory(username=username))
    return client


@pytest.mark.django_db
def test_a_view_saved_through_the_api_opens_the_list_so_and_is_its_owners_alone() -> None:
    ana, bob = client_of("ana"), client_of("bob")

    made = ana.post(
        URL,
        {"list_name": "reservations", "name": "orphans", "query": "orphaned=true&cols=name&page=3"},
        format="json",
    )

    assert made.status_code == 201, made.json()
    body = made.json()
    # As the page saves it: less its page.
    assert body["query"] == "orphaned=true&cols=name"
    assert body["url"] == "/reservations/?orphaned=true&cols=name"
    assert [v["name"] for v in ana.get(URL).json()["results"]] == ["orphans"]
    assert bob.get(URL).json()["results"] == []
    assert bob.get(f"{URL}{body['id']}/").status_code == 404
    assert bob.delete(f"{URL}{body['id']}/").status_code == 404
    assert ana.delete(f"{URL}{body['id']}/").status_code == 204
    assert not SavedView.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "status", "field", "says"),
    [
        ({"list_name": "vms", "name": "x", "query": "clustr=prod"}, 400, "query", "clustr"),
        ({"list_name": "vms", "name": "x", "query": "cols=price"}, 400, "query", "price"),
        ({"list_name": "leaks", "name": "x", "query": ""}, 400, "list_name", "leaks"),
        ({"list_name": "vms", "name": "  ", "query": ""}, 400, "name", ""),
    ],
)
def test_a_query_the_list_would_refuse_is_refused_naming_the_problem(
    body: dict[str, str], status: int, field: str, says: str
) -> None:
    answer = client_of("ana").post(URL, body, format="json")

    assert answer.status_code == status, answer.json()
    assert says in " ".join(answer.json()["fields"][field])
    assert not SavedView.objects.exists()


@pytest.mark.django_db
def test_a_name_taken_is_a_conflict() -> None:
    ana = client_of("ana")
    view = {"list_name": "clusters", "name": "failing", "query": "failed=true"}
    assert ana.post(URL, view, format="json").status_code == 201

    again = ana.post(URL, view, format="json")

    assert again.status_code == 409
    assert "choose another name" in again.json()["fields"]["name"][0]


@pytest.mark.django_db
def test_a_view_without_a_query_is_the_whole_list() -> None:
    made = client_of("ana").post(URL, {"list_name": "vms", "name": "all"}, format="json")

    assert made.status_code == 201, made.json()
    assert (made.json()["query"], made.json()["url"]) == ("", "/vms/")
