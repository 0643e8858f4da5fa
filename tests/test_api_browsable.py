"""The browsable API (`Accept: text/html`, what a browser gets at /api/v1/...) answers every
GET route for every role, never a 500: it renders the forms of the other methods too, and
asks the permissions about the object it shows."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.api_fuzz import CONTRACT_USER, CONTRACT_VIEWER, seed_world, served_schema

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("username", [CONTRACT_USER, CONTRACT_VIEWER])
def test_every_get_route_renders_as_html_for_every_role(username: str) -> None:
    world = seed_world()
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.get(username=username))
    paths = [path for path, item in served_schema()["paths"].items() if "get" in item]
    assert len(paths) > 30
    answers = {}
    for path in paths:
        collection = path.split("/{")[0].removeprefix("/api/v1/")
        url = re.sub(r"\{id\}", str(world.get(collection, 1)), path)
        url = url.replace("{pod_uid}", "00000000-0000-0000-0000-000000000000")
        response = client.get(url, HTTP_ACCEPT="text/html")
        answers[url] = response.status_code
        if response.status_code == 200 and "/schema/" not in url:
            assert response["Content-Type"].startswith(("text/html", "application/yaml")), url
    assert {url: code for url, code in answers.items() if code >= 500} == {}
    # The objects the world holds are shown, to the viewer too.
    assert answers[f"/api/v1/sriov/clusters/{world['sriov/clusters']}/"] == 200
    assert answers[f"/api/v1/clusters/{world['clusters']}/"] == 200
