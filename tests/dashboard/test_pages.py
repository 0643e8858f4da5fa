"""Every page works as a whole page (no JavaScript needed) and as the fragment htmx polls
for, with `Vary: HX-Request` on both; what each shows."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.test import Client

from tests.dashboard.conftest import World

PAGES = ["/", "/reservations/", "/clusters/", "/audit/"]


def _fragment(client: Client, path: str, target: str) -> str:
    response = client.get(path, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=target)
    assert response.status_code == 200
    assert "HX-Request" in response["Vary"]
    body = response.content.decode()
    assert "<html" not in body
    assert f'id="{target}"' in body
    return body


@pytest.mark.parametrize("path", PAGES)
def test_each_page_is_a_whole_page_without_htmx(
    admin_client: Client, world: World, path: str
) -> None:
    response = admin_client.get(path)
    assert response.status_code == 200
    assert b"<html" in response.content
    assert "HX-Request" in response["Vary"]


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/", "overview"),
        ("/", "system-status"),
        ("/reservations/", "reservation-table"),
        ("/clusters/", "cluster-table"),
        ("/audit/", "audit-table"),
    ],
)
def test_each_fragment_is_served_alone_to_htmx(
    admin_client: Client, world: World, path: str, target: str
) -> None:
    _fragment(admin_client, path, target)


def test_the_cluster_page_and_its_fragment(admin_client: Client, world: World) -> None:
    path = f"/clusters/{world.cluster.pk}/"
    page = admin_client.get(path)
    assert page.status_code == 200 and b"<html" in page.content
    body = _fragment(admin_client, path, "cluster-body")
    assert world.machines[0].name in body


def test_a_polling_fragment_of_an_ended_session_sends_the_browser_to_the_login_page(
    client: Client, world: World
) -> None:
    response = client.get(
        "/reservations/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="reservation-table"
    )
    # Not a 302 whose login page htmx would draw inside the table.
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith("/login/?next=/reservations/")
    assert b"<form" not in response.content


def test_pages_name_a_favicon_and_the_old_path_finds_it(
    admin_client: Client, client: Client
) -> None:
    assert b'rel="icon"' in admin_client.get("/").content
    response = client.get("/favicon.ico")  # no login needed
    assert response.status_code == 301
    assert response["Location"].endswith("favicon.svg")


class _InlineCode(HTMLParser):
    """Finds what a Content-Security-Policy without 'unsafe-inline' would block."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if tag == "style" or (tag == "script" and "src" not in names):
            self.found.append(f"<{tag}> inline")
        self.found += [
            f"{name}= on <{tag}>"
            for name in names
            if name == "style" or name.startswith(("on", "hx-on"))
        ]


def test_pages_hold_no_inline_script_or_style(admin_client: Client, world: World) -> None:
    paths = [
        *PAGES,
        f"/clusters/{world.cluster.pk}/",
        f"/reservations/{world.orphan.pk}/release/",
        f"/pools/{world.pool.pk}/scale/",
        "/login/",
    ]
    for path in paths:
        parser = _InlineCode()
        parser.feed(admin_client.get(path).content.decode())
        assert parser.found == [], path
