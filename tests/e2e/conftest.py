"""Browser tests: Playwright drives Debian's Chromium (no browser download); a screenshot
of the page is saved under var/test-artifacts/ when a browser test fails.

The guides' pictures are taken by the browser tests that read what they show (`picture`):
`bin/pictures` runs those tests and keeps the pictures in docs/guides/pictures/; in the
suite they go to a temporary folder, so that taking them is tested too."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator

from tests.conftest import require
from tests.servers import tmpfs

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts"
PICTURES_INTO = "CAPVCO_PICTURES"  # the folder bin/pictures has them written to


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    require(CHROMIUM.exists(), "needs Debian's chromium (bin/test installs it)")
    return {
        **browser_type_launch_args,
        "executable_path": str(CHROMIUM),
        "args": [
            "--no-sandbox",
            "--headless",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    }


@pytest.fixture(scope="session")
def django_allow_async_unsafe() -> Iterator[None]:
    """Playwright's sync API runs an event loop in the test's thread: Django would take
    the test's own database calls for calls from async code."""
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if before is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


@pytest.fixture
def screenshot_on_failure(request: pytest.FixtureRequest, page: Any) -> Iterator[None]:
    yield
    if request.node.stash.get(FAILED, False):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{request.node.name}.png"
        page.screenshot(path=str(path), full_page=True)
        print(f"screenshot of the failed page: {path}")


@pytest.fixture
def picture(tmp_path: Path) -> Callable[[str, Locator], Path]:
    """Take the guides' picture NAME of a part of the page (NAME.png), as the test has just
    read it; the caret is hidden and animations end, so that a picture taken again is the
    same where the page is."""
    folder = Path(os.environ.get(PICTURES_INTO) or tmp_path)

    def take(name: str, part: Locator) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.png"
        part.scroll_into_view_if_needed()
        part.screenshot(path=str(path), animations="disabled", caret="hide")
        return path

    return take


@pytest.fixture
def small_disk() -> Iterator[Callable[[int], Path]]:
    """Mounts a tmpfs of the MiB asked for, for this test alone, and answers where: a small
    disk to fill (tests.servers.disk_fill). Mounting needs root (CI's tests run as root).
    Outside of the test's tmp_path, which is root's alone: a PostgreSQL server (run as
    another user) keeps its data there too."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    with ExitStack() as mounted:

        def mount(megabytes: int) -> Path:
            folder = Path(tempfile.mkdtemp(prefix="capvco-disk-"))
            folder.chmod(0o755)
            mounted.callback(folder.rmdir)  # once unmounted (callbacks run last first)
            try:
                return mounted.enter_context(tmpfs(folder, megabytes))
            except OSError as exc:
                require(False, str(exc))
                raise

        yield mount
