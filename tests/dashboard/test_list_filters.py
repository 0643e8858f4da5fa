"""The dashboard's lists speak the API's filter language, walked from the URL resolver (a
new list page is walked as soon as it is routed): a parameter the page does not take is
refused (400) saying so, not answered with everything, and each of its filters answers
200 and narrows the list (two of everything, the filter picks one side)."""

from __future__ import annotations

import csv
import io
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from django.db.models import Model
from django.http import HttpResponse, StreamingHttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.filter_world import World, two_of_everything, value_for

pytestmark = pytest.mark.django_db

# The dashboard's pages without a path parameter that are not lists.
NOT_LISTS = {
    "dashboard:overview",
    "dashboard:cluster-new",
    "dashboard:dismiss",
    "dashboard:search",  # one word (`q`) over every kind, not a list's filters
    "dashboard:orphans-release",  # an action on every orphan the user may release
    "dashboard:bills",  # the latest bill check of each location, not a list
    "dashboard:saved-view-save",  # saves a list's query (POST)
}


def _pages() -> dict[str, Any]:
    """Each dashboard URL without a path parameter, by name, with its view."""
    found: dict[str, Any] = {}
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver) and entry.namespace == "dashboard":
            for pattern in entry.url_patterns:
                assert isinstance(pattern, URLPattern)
                if not pattern.pattern.regex.groups:
                    found[f"dashboard:{pattern.name}"] = pattern.callback
    return found


PAGES = _pages()
LISTS = {name: view for name, view in PAGES.items() if hasattr(view, "filterset_class")}
FILTERS = [
    (page, name) for page, view in LISTS.items() for name in view.filterset_class.base_filters
]


@pytest.fixture
def world() -> World:
    return two_of_everything()


def test_every_page_without_a_path_parameter_is_a_list_or_known_not_to_be() -> None:
    assert set(PAGES) - set(LISTS) == NOT_LISTS
    assert {
        "dashboard:reservations",
        "dashboard:nodes",
        "dashboard:nics",
        "dashboard:leaks",
        "dashboard:idle-gpus",
    } <= set(LISTS)


def _pk(item: Any) -> Any:
    if isinstance(item, Model):
        return item.pk
    assert is_dataclass(item), item
    return next(_pk(getattr(item, f.name)) for f in fields(item))


def _listed(response: HttpResponse | StreamingHttpResponse) -> list[Any]:
    """The pks of the objects the list shows (the first column of a CSV)."""
    if isinstance(response, StreamingHttpResponse):
        text = b"".join(response.streaming_content).decode()  # type: ignore[arg-type]
        return [row[0] for row in list(csv.reader(io.StringIO(text)))[1:]]
    context = response.context
    rows = next(context[key] for key in ("rows", "summaries") if key in context)
    return [_pk(row) for row in rows]


@pytest.mark.parametrize("page", sorted(LISTS))
def test_an_unknown_parameter_is_refused_saying_so(admin_client: Client, page: str) -> None:
    response = admin_client.get(reverse(page), {"clustr": "prod"})

    assert response.status_code == 400
    body = (
        b"".join(response.streaming_content)  # type: ignore[attr-defined]
        if response.streaming
        else response.content
    ).decode()
    assert "clustr: not a filter of this list" in body


@pytest.mark.parametrize(("page", "name"), FILTERS, ids=[f"{p}?{n}" for p, n in FILTERS])
def test_each_filter_narrows_its_list(
    admin_client: Client, world: World, page: str, name: str
) -> None:
    model = LISTS[page].filterset_class._meta.model
    value = value_for(world, model, name)

    everything = admin_client.get(reverse(page))
    picked = admin_client.get(reverse(page), {name: value})

    assert everything.status_code == picked.status_code == 200, picked.content
    listed, narrowed = _listed(everything), _listed(picked)
    assert 0 < len(narrowed) < len(listed), f"{name}={value}: {narrowed} of {listed}"
    assert set(narrowed) <= set(listed)


def test_the_links_of_a_cluster_name_it_by_id(admin_client: Client, world: World) -> None:
    cluster = world.first.related["cluster"]

    listed = admin_client.get(reverse("dashboard:clusters")).content.decode()
    page = admin_client.get(reverse("dashboard:cluster", args=[cluster.pk])).content.decode()

    assert f"/reservations/?cluster={cluster.pk}" in listed
    assert f"cluster={cluster.pk}" in page and "cluster=cluster-a" not in page
