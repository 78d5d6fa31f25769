"""The Crews page and the Crew tab of an Airflow served under a path (``[api] base_url`` with a path).

Behind a reverse proxy, ``https://example.com/airflow/`` may be all of Airflow a browser reaches. The
browser here reaches only that: every request outside the path is refused, as such a proxy would (the
api-server itself would answer it). One stack: api-server, scheduler and dag-processor at ``/airflow``,
and the local research crew on ``crew_default``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from tests.browser.harness import (
    UI_TIMEOUT_MS,
    Steps,
    log_in,
    missing_requirement,  # noqa: F401 - the skipif condition reads it
)
from tests.e2e.airflow_stack import AirflowStack, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="plugin views (external_views) need Airflow 3.1+"),
    # Read when each test starts, not at import: Chromium is installed once the selection is known.
    pytest.mark.skipif("bool(missing_requirement())", reason="no Playwright or Chromium (see the log)"),
]

DAG_FILE = Path(__file__).resolve().parents[2] / "example_dags" / "example_crew_task_decorator.py"
DAG_ID = "example_crew_task_decorator"
URL_PATH = "/airflow"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    from airflow_provider_crew.testing import LocalCrewService

    tmp_path = tmp_path_factory.mktemp("crew-views-under-a-path")
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    with contextlib.ExitStack() as resources:
        research = resources.enter_context(LocalCrewService("research"))
        airflow = AirflowStack(
            tmp_path / "home", dags, research.connection_env("crew_default"), url_path=URL_PATH
        )
        try:
            airflow.migrate()
            airflow.start(("api-server", "scheduler", "dag-processor"))
            airflow.wait_for_dag(DAG_ID)
            yield airflow
        finally:
            airflow.stop()


def only_under_the_path(page: Any, airflow: AirflowStack) -> list[str]:
    """Refuse the page's requests to the api-server outside Airflow's path, as a proxy serving only
    that path would; return the list of those refused (it fills as the page runs)."""
    root = airflow.base_url.removesuffix(URL_PATH)
    refused: list[str] = []

    def refuse(route: Any) -> None:
        refused.append(route.request.url)
        route.abort()

    page.context.route(re.compile(rf"^{re.escape(root)}(?!{re.escape(URL_PATH)}(/|$)).*"), refuse)
    return refused


def test_the_crews_page_and_the_crew_tab_work_under_a_path(stack: AirflowStack, steps: Steps) -> None:
    from playwright.sync_api import expect

    airflow = stack
    page = steps.page
    refused = only_under_the_path(page, airflow)
    run_id = airflow.trigger(DAG_ID)
    wait_for(lambda: airflow.dag_run_state(DAG_ID, run_id) == "success" or None, timeout=240, what="the run")
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    page.goto(f"{airflow.base_url}/plugin/crews", wait_until="domcontentloaded")
    crews = page.frame_locator("iframe[title='Crews']")
    row = crews.locator("tbody tr", has_text=run_id).filter(has_text="overview")
    expect(row).to_be_visible(timeout=UI_TIMEOUT_MS)
    # Every column shows whole in the UI's frame, the last one too (long run ids wrap).
    expect(row.locator("td").last).to_be_in_viewport(ratio=1)
    # The address stays the page's under the path too (3.3.2 mirrors the frame's address into it).
    expect(crews.locator("body[data-ui-address-kept]")).to_be_attached(timeout=UI_TIMEOUT_MS)
    expect(page).to_have_url(f"{airflow.base_url}/plugin/crews")
    steps.shot("crews-under-a-path")
    # The task's link opens its Crew tab in the UI, under the path.
    row.get_by_role("link", name="overview").click()
    expect(page).to_have_url(
        re.compile(rf"^{re.escape(airflow.base_url)}/dags/{DAG_ID}/runs/.+/tasks/overview/plugin/crew$"),
        timeout=UI_TIMEOUT_MS,
    )
    tab = page.frame_locator("iframe[title='Crew']")
    expect(tab.locator("[data-state='succeeded']")).to_be_visible(timeout=UI_TIMEOUT_MS)
    steps.shot("crew-tab-under-a-path")
    ours = [url for url in refused if "/crew-ui/" in url]
    assert not ours, f"the views asked outside {URL_PATH}: {ours}"
    if refused:  # Airflow 3.2.2's own UI asks for /api/v2/version at the root
        print(f"Airflow's UI asked outside {URL_PATH}: {sorted(set(refused))}")
