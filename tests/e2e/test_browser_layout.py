"""The dashboard's layout in a real browser (Chromium through Playwright): on a 1,440 px
screen the header's navigation is one line, and at a phone's width (390 px) no main page
scrolls sideways: what is wider than the screen (a table) scrolls in its own box."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from tests.e2e.test_dashboard_browser import log_in, seeded  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")

PAGES = [
    "/", "/reservations/", "/clusters/", "/nodes/", "/pods/pending/", "/nics/", "/leaks/",
    "/audit/", "/search/?q=browser",
]  # fmt: skip


def _pages(seeded: dict[str, Any]) -> list[str]:  # noqa: F811 - the fixture's value
    cluster = seeded["held"].machine.pool.cluster
    return [*PAGES, f"/clusters/{cluster.pk}/", f"/locations/{seeded['location'].pk}/"]


def _nav_rows(page: Page) -> int:
    """How many lines the header's items take: their distinct tops."""
    tops = page.evaluate(
        """() => [...document.querySelectorAll('.topbar > *, .topbar nav > *')]
                 .map(e => Math.round(e.getBoundingClientRect().top))"""
    )
    rows: list[int] = []
    for top in sorted(tops):
        if not rows or top - rows[-1] > 4:
            rows.append(top)
    return len(rows)


def test_the_navigation_is_one_line_on_a_wide_screen(
    page: Page,
    live_server: Any,
    seeded: dict[str, Any],  # noqa: F811
) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_server)
    wrapped = {}
    for path in _pages(seeded):
        page.goto(f"{live_server.url}{path}")
        if (rows := _nav_rows(page)) != 1:
            wrapped[path] = rows
    assert wrapped == {}


def test_no_page_scrolls_sideways_at_a_phones_width(
    page: Page,
    live_server: Any,
    seeded: dict[str, Any],  # noqa: F811
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server)
    wider = {}
    for path in _pages(seeded):
        page.goto(f"{live_server.url}{path}")
        width = page.evaluate("() => document.scrollingElement.scrollWidth")
        inner = page.evaluate("() => window.innerWidth")
        if width > inner:
            wider[path] = (width, page.evaluate(OVERFLOWING))
    assert wider == {}


# The outermost elements that reach past the screen's right edge, outside any box that
# scrolls or clips them: what to fix.
OVERFLOWING = """() => {
  const past = e => e.getBoundingClientRect().right > window.innerWidth + 1;
  const clipped = e => {
    for (let a = e.parentElement; a; a = a.parentElement)
      if (getComputedStyle(a).overflowX !== 'visible') return true;
    return false;
  };
  return [...document.querySelectorAll('body *')]
    .filter(e => past(e) && !clipped(e) && !past(e.parentElement))
    .slice(0, 5)
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
              (typeof e.className === 'string' && e.className ? '.' + e.className : ''));
}"""
