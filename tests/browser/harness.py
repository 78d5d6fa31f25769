"""A real browser for UI tests: Debian's Chromium driven by Playwright, a screenshot per step.

Playwright's own browser download is not used (CI and this machine cannot reach it): the tests
launch the system Chromium (Debian package ``chromium``) through ``executable_path``. The fixtures
in ``tests/browser/conftest.py`` wrap what is here; another test folder can import this module
directly and reuse :func:`launch_chromium`, :class:`Steps` and :func:`log_in`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

REPO = Path(__file__).resolve().parents[2]
#: The browser binary; ``CHROMIUM`` overrides it (e.g. a Chromium installed elsewhere).
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
#: Headless, no sandbox (CI containers run as root), and nothing that phones home or updates itself:
#: the machine reaches only package registries, and a test must not wait on anything else.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
#: Where screenshots go: ``BROWSER_ARTIFACTS`` or ``test-artifacts/browser`` in the repository
#: (ignored by git; a CI job can upload the folder).
ARTIFACTS = Path(os.environ.get("BROWSER_ARTIFACTS", REPO / "test-artifacts" / "browser"))
#: How long one UI expectation may wait (Playwright polls until then). Generous: a 2-core machine
#: running other tests can take seconds to render a page.
UI_TIMEOUT_MS = 30_000


def missing_requirement() -> str | None:
    """Why a browser test cannot run here, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]' installs it)"
    if not CHROMIUM.is_file() or not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set CHROMIUM)"
    return None


_running: list[Browser] = []


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    """Start the system Chromium headless through Playwright; close it and Playwright afterwards.

    Inside another ``launch_chromium()`` (e.g. the session's ``browser`` fixture) it yields that
    browser instead: Playwright's sync API allows one instance per thread, a second one fails with
    "using Playwright Sync API inside the asyncio loop".
    """
    if _running:
        yield _running[-1]
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS))
        _running.append(browser)
        try:
            yield browser
        finally:
            _running.remove(browser)
            browser.close()


def artifact_folder(name: str, *, group: str | None = None) -> Path:
    """An emptied folder for one test's screenshots, named after the test.

    :param name: The test's name.
    :param group: A parent folder, e.g. ``airflow-3.3.2`` so runs on several Airflow versions keep
        their screenshots apart.
    """
    parent = ARTIFACTS / _safe(group) if group else ARTIFACTS
    folder = parent / _safe(name)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    return folder


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


class Steps:
    """Numbered screenshots of one page, one per step: ``01-login.png``, ``02-form.png``...

    :param page: The Playwright page to capture.
    :param folder: Where the PNG files go.
    """

    def __init__(self, page: Page, folder: Path) -> None:
        self.page = page
        self.folder = folder
        self.taken: list[Path] = []

    def shot(self, name: str, *, full_page: bool = True, element: Locator | None = None) -> Path:
        """Save a screenshot named after the step and return its path.

        :param name: What the step shows, e.g. ``"form-filled"``.
        :param full_page: Capture the whole scrollable page, not only the viewport.
        :param element: Capture only this element, once it stops moving (e.g. a notification that
            is still sliding in).
        """
        path = self.folder / f"{len(self.taken) + 1:02d}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
        if element is not None:
            element.screenshot(path=str(path))
        else:
            self.page.screenshot(path=str(path), full_page=full_page)
        self.taken.append(path)
        return path


def log_in(page: Page, base_url: str, username: str, password: str, steps: Steps | None = None) -> None:
    """Log in to the Airflow UI through its login page, as a person does, and wait for the home page.

    Works with SimpleAuthManager's login form (Airflow 3.0-3.3): a username and a password field
    and a "Sign in" button; after it the UI is served from ``base_url``.

    :param page: A page of a fresh browser context.
    :param base_url: The api-server's address, e.g. ``http://127.0.0.1:8080``.
    :param username: A user configured in ``[core] simple_auth_manager_users``.
    :param password: That user's password.
    :param steps: Screenshots of the login page and of the page after it, when given.
    """
    from playwright.sync_api import expect

    page.goto(f"{base_url}/", wait_until="domcontentloaded")
    username_box = page.locator("input[name='username'], input#username").first
    expect(username_box).to_be_visible(timeout=UI_TIMEOUT_MS)
    username_box.fill(username)
    page.locator("input[name='password'], input#password, input[type='password']").first.fill(password)
    if steps:
        steps.shot("login-form")
    page.get_by_role("button", name=re.compile(r"sign in|log ?in", re.IGNORECASE)).click()
    # The UI keeps its token in a cookie and leaves the /auth pages once the login succeeded.
    page.wait_for_url(lambda url: "/auth/" not in url, timeout=UI_TIMEOUT_MS)
    expect(page.get_by_role("button", name=re.compile(r"^admin$", re.IGNORECASE))).to_be_visible(
        timeout=UI_TIMEOUT_MS
    )
    if steps:
        steps.shot("logged-in")


def new_page(browser: Browser, **context_options: Any) -> Page:
    """A page in a fresh context (own cookies), 1400x1000, with the harness's expectation timeout.

    :param browser: From :func:`launch_chromium`.
    :param context_options: More ``browser.new_context`` options.
    """
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, **context_options)
    context.set_default_timeout(UI_TIMEOUT_MS)
    return context.new_page()


#: Where :func:`serve_views` serves the plugin's pages (no Airflow behind them).
VIEWS_BASE = "http://views.test/crew-ui"


def serve_views(page: Page, data: Mapping[str, Any]) -> list[str]:
    """Serve the Crew tab and the Crews page at :data:`VIEWS_BASE` as the plugin serves them, their data
    routes answering ``data`` (path under the base -> JSON), with no stack behind them. Returns the
    messages of the dialogs the pages open (each dismissed): a hostile value must open none.
    """
    import json

    from airflow_provider_crew.plugins import crew_views

    answers = {
        "/task-instance/d/r/t/-1": (crew_views._PAGES["crew_tab.html"], "text/html"),
        "/crews": (crew_views._PAGES["crews.html"], "text/html"),
        **{path: (json.dumps(value), "application/json") for path, value in data.items()},
    }

    def fulfil(route: Any) -> None:
        body, content_type = answers[route.request.url.split("?")[0].removeprefix(VIEWS_BASE)]
        route.fulfill(body=body, content_type=content_type)

    page.route(f"{VIEWS_BASE}/**", fulfil)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    return dialogs
