"""Saved views: a list's query (filters, search, columns, order) saved by a person under a
name, checked against the list's filter language when saved (a broken one is refused
naming the problem, nothing saved), offered on that list to its owner only, opened as
saved, and deleted by its owner only."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from dashboard.models import SavedView
from dashboard.saved_views import saved_view_create, saved_view_delete
from tests.dashboard.conftest import Kube, World

pytestmark = pytest.mark.django_db
QUERY = "orphaned=true&cols=name%2Cper_hour&sort=name"


def test_a_view_saved_from_the_list_is_offered_there_and_opens_as_saved(
    admin_client: Client, world: World
) -> None:
    page = admin_client.get(f"/reservations/?{QUERY}&after=").content.decode()
    # The query the form saves travels with the table, as the table shows it now.
    assert f'name="query" value="{QUERY.replace("&", "&amp;")}" form="save-view"' in page

    saved = admin_client.post(
        "/views/save/", {"list": "reservations", "name": "orphans by name", "query": QUERY}
    )
    assert saved.status_code == 302 and saved["Location"] == f"/reservations/?{QUERY}"
    view = SavedView.objects.get()
    assert (view.list_name, view.name, view.query) == ("reservations", "orphans by name", QUERY)

    listed = admin_client.get("/reservations/").content.decode()
    assert f'<a href="/reservations/?{QUERY.replace("&", "&amp;")}">orphans by name</a>' in listed
    assert "orphans by name" not in admin_client.get("/vms/").content.decode()
    opened = admin_client.get(saved["Location"])
    assert [row.reservation for row in opened.context["rows"]] == sorted(
        [world.orphan, world.leak], key=lambda r: r.name
    )
    assert opened.context["shown"] == {"name", "per_hour"}


@pytest.mark.parametrize(
    ("list_name", "query", "problem"),
    [
        ("reservations", "clustr=prod", "clustr: not a filter of this list"),
        ("reservations", "orphaned=maybe", "orphaned: Give true or false."),
        ("reservations", "cols=name,price", "cols: this list has no column 'price'"),
        ("reservations", "sort=cost", "Unknown sort 'cost'"),
        ("vms", "sort=name", "sort: not a filter of this list"),
        ("vms", "location=prod", "location: Give an id (a whole number)."),
        ("nodes", "flag=lost", "flag: Select a valid choice. lost is not one of the"),
        ("nodes", "cols=name,price", "cols: this list has no column 'price' (it has cluster, "),
        ("leaks", "", "No list 'leaks' keeps views"),
    ],
)
def test_a_broken_view_is_refused_naming_the_problem_and_nothing_is_saved(
    admin_client: Client, world: World, list_name: str, query: str, problem: str
) -> None:
    response = admin_client.post(
        "/views/save/", {"list": list_name, "name": "broken", "query": query}
    )
    assert response.status_code == 400
    assert problem in response.content.decode().replace("&#x27;", "'")
    assert not SavedView.objects.exists()


def test_a_name_is_needed_and_used_once_per_list(admin_user: User, world: World) -> None:
    with pytest.raises(ValidationError, match="Give the view a name"):
        saved_view_create(user=admin_user, list_name="vms", name=" ", query="")
    saved_view_create(user=admin_user, list_name="vms", name="all", query="")
    saved_view_create(user=admin_user, list_name="reservations", name="all", query="")
    with pytest.raises(ValidationError, match="You have a view of vms named 'all'"):
        saved_view_create(user=admin_user, list_name="vms", name="all", query="orphaned=true")
    assert SavedView.objects.count() == 2


def test_a_view_is_its_owners_alone(
    admin_user: User, member: Callable[[str], Client], world: World
) -> None:
    view = saved_view_create(
        user=admin_user, list_name="vms", name="orphans", query="orphaned=true"
    )
    other = member("admin")
    assert "orphans" not in other.get("/vms/").content.decode()
    assert other.post(f"/views/{view.pk}/delete/").status_code == 404
    someone = User.objects.exclude(pk=admin_user.pk).get()
    with pytest.raises(PermissionDenied):
        saved_view_delete(view=view, user=someone)
    assert SavedView.objects.filter(pk=view.pk).exists()


def test_the_owner_deletes_a_view(admin_client: Client, admin_user: User, world: World) -> None:
    view = saved_view_create(user=admin_user, list_name="vms", name="orphans", query="")
    response = admin_client.post(f"/views/{view.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == "/vms/"
    assert not SavedView.objects.exists()
    assert admin_client.get(f"/views/{view.pk}/delete/").status_code == 405


def test_a_view_of_the_clusters_list_is_saved_without_its_page(
    admin_client: Client, world: World
) -> None:
    response = admin_client.post(
        "/views/save/",
        {"list": "clusters", "name": "failing", "query": "failed=true&cols=name,failed&page=2"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/clusters/?failed=true&cols=name%2Cfailed"
    assert '">failing</a>' in admin_client.get("/clusters/").content.decode()


def test_a_view_of_the_node_list_is_saved_offered_there_and_opens_as_saved(
    admin_client: Client, kube: Kube
) -> None:
    query = "flag=gpus-missing&cols=name%2Cflags"
    page = admin_client.get(f"/nodes/?{query}&after=").content.decode()
    assert f'name="query" value="{query.replace("&", "&amp;")}" form="save-view"' in page

    saved = admin_client.post("/views/save/", {"list": "nodes", "name": "silent", "query": query})
    assert saved.status_code == 302 and saved["Location"] == f"/nodes/?{query}"
    assert '">silent</a>' in admin_client.get("/nodes/").content.decode()
    opened = admin_client.get(saved["Location"])
    assert [row.node for row in opened.context["rows"]] == [kube.silent]
    assert opened.context["shown"] == {"name", "flags"}
