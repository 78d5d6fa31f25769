"""Fixtures for tests that drive the Airflow UI in a real browser (marker ``browser``).

- ``browser``: the system Chromium through Playwright, one per test module. Every test that asks
  for it is skipped, with the reason, when Playwright or Chromium is missing.
- ``steps``: a fresh page (own cookies) plus numbered screenshots of it under
  ``test-artifacts/browser/airflow-<version>/<test>/`` (``BROWSER_ARTIFACTS`` moves it). The last
  screenshot of a failed test is ``NN-failed.png``. The folders are listed at the end of the run.

Log in with :func:`tests.browser.harness.log_in` and an :class:`tests.e2e.airflow_stack.AirflowStack`'s
``username`` and ``password``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import harness

_SCREENSHOT_FOLDERS = pytest.StashKey[list[Path]]()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """The system Chromium, headless, driven by Playwright (``playwright.sync_api.Browser``).

    Module scope: Playwright's sync API keeps an event loop running in this thread while it is open,
    and async tests in later modules need the thread without one.
    """
    reason = harness.missing_requirement()
    if reason:
        pytest.skip(f"browser test: {reason}")
    with harness.launch_chromium() as chromium:
        yield chromium


@pytest.fixture
def steps(browser: Any, request: pytest.FixtureRequest) -> Iterator[harness.Steps]:
    """A new page and its screenshot recorder; ``steps.page`` is the Playwright page."""
    import airflow

    folder = harness.artifact_folder(
        request.node.nodeid.split("::", 1)[-1], group=f"airflow-{airflow.__version__}"
    )
    request.config.stash.setdefault(_SCREENSHOT_FOLDERS, []).append(folder)
    print(f"screenshots: {folder}")
    page = harness.new_page(browser)
    recorder = harness.Steps(page, folder)
    try:
        yield recorder
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            try:
                recorder.shot("failed")
            except Exception as error:  # the page may be gone; the test's own error matters more
                print(f"could not take the failure screenshot: {error}")
        page.context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test item, so ``steps`` knows whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    folders = config.stash.get(_SCREENSHOT_FOLDERS, [])
    if folders:
        terminalreporter.section("browser screenshots")
        for folder in folders:
            terminalreporter.write_line(f"{folder} ({len(list(folder.glob('*.png')))} files)")
