"""End to end: the "Crew execution" link in Airflow's REST API, from a real api-server.

Real api-server, scheduler (LocalExecutor), dag-processor and triggerer (tests/e2e/airflow_stack.py)
run a deferrable kickoff against the local crew service, with the connection's execution page URL
template set. The test reads ``GET /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/links``
(what the UI's button shows) while the task is deferred, after it succeeded, and after a run whose
crew failed. Where Chromium and Playwright are installed (CI installs both) it also opens the task's
page in the Airflow UI, as a person does, and checks the "Crew execution" button there at the same
three moments, with a screenshot of each under ``test-artifacts/browser/``.

Run it alone with ``pytest -m e2e tests/links`` (about 1-2 minutes); every process it starts is
killed in the fixture's teardown.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_crew.connection import build_execution_url
from tests.browser import harness
from tests.e2e.airflow_stack import FAST_SETTLE, AirflowStack, wait_for

pytestmark = pytest.mark.e2e

DAG_FILE = Path(__file__).resolve().parent / "dags" / "crew_execution_link.py"
DAG_ID = "crew_execution_link"
TASK_ID = "kickoff"
LINK_NAME = "Crew execution"
TEMPLATE = "https://dashboard.example.test/crews/research/executions/{kickoff_id}"
RUN_TIMEOUT = 180


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[AirflowStack, Any]]:
    from airflow_provider_crew.testing import LocalCrewService

    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)  # only this DAG: parsing stays quick
    # Agent steps of 5 s: the execution runs for about 20 s, so the task stays deferred long enough
    # to be seen deferred on a loaded machine, and the trigger never fires within a scheduler loop of
    # the deferral (apache/airflow#67287).
    with LocalCrewService("research", speed=0.01) as service:
        env = {
            **service.connection_env("crew_default", execution_url_template=TEMPLATE),
            **FAST_SETTLE,
        }
        airflow = AirflowStack(tmp_path / "home", dags, env)
        try:
            airflow.migrate()
            airflow.start()
            yield airflow, service
        except BaseException:
            for component in airflow.processes:
                print(f"----- {component} -----\n{airflow.log_tail(component)}")
            raise
        finally:
            airflow.stop()


def links(airflow: AirflowStack, run_id: str) -> dict[str, Any]:
    answer = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}/links")
    return dict(answer["extra_links"])


class TaskPageInBrowser:
    """The kickoff task's page in the Airflow UI, in a real browser; a no-op without Chromium."""

    def __init__(self, airflow: AirflowStack, folder_name: str) -> None:
        self.airflow = airflow
        self.folder_name = folder_name
        self.missing = harness.missing_requirement()
        if self.missing:
            print(f"browser part skipped: {self.missing}")

    def __enter__(self) -> TaskPageInBrowser:
        if self.missing:
            return self
        import airflow as airflow_package

        self._browser = harness.launch_chromium()
        browser = self._browser.__enter__()
        self.page = harness.new_page(browser)
        folder = harness.artifact_folder(self.folder_name, group=f"airflow-{airflow_package.__version__}")
        print(f"screenshots: {folder}")
        self.steps = harness.Steps(self.page, folder)
        harness.log_in(self.page, self.airflow.base_url, self.airflow.username, self.airflow.password)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if not self.missing:
            if exc_info[0] is not None:
                self.steps.shot("failed")
            self.page.context.close()
            self._browser.__exit__(*exc_info)

    def link_href(self, run_id: str, moment: str) -> str | None:
        """Open the task's Details tab; the "Crew execution" button's address (None: no browser)."""
        if self.missing:
            return None
        from playwright.sync_api import expect

        # The task's Details tab lists Airflow's "Extra Links" as buttons.
        self.page.goto(
            f"{self.airflow.base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{TASK_ID}/details",
            wait_until="domcontentloaded",
        )
        link = self.page.get_by_role("link", name=LINK_NAME, exact=True)
        expect(link).to_be_visible(timeout=harness.UI_TIMEOUT_MS)
        self.steps.shot(f"task-page-{moment}")
        return link.get_attribute("href")


def task_state(airflow: AirflowStack, run_id: str) -> str | None:
    airflow.check_alive()
    return airflow.task_states(DAG_ID, run_id).get(TASK_ID)


def wait_for_end(airflow: AirflowStack, run_id: str) -> str:
    def ended() -> str | None:
        state = airflow.dag_run_state(DAG_ID, run_id)
        return state if state in ("success", "failed") else None

    return wait_for(ended, timeout=RUN_TIMEOUT, what=f"DAG run {run_id} to end")


def test_the_link_shows_while_deferred_after_success_and_after_failure(stack):
    airflow, service = stack
    airflow.wait_for_dag(DAG_ID)
    with TaskPageInBrowser(airflow, "test_the_crew_execution_link_on_the_task_page") as ui:
        check_the_link(airflow, service, ui)


def check_the_link(airflow: AirflowStack, service: Any, ui: TaskPageInBrowser) -> None:

    run_id = airflow.trigger(DAG_ID)
    # The service's own record of what was started (the XCom API needs deserialisation enabled on 3.0).
    (kickoff_id,) = wait_for(lambda: list(service.executions), timeout=RUN_TIMEOUT, what="the kickoff")
    expected = build_execution_url(TEMPLATE, kickoff_id)

    # While deferred: the link is read, then the task is seen still deferred after that read.
    def link_while_deferred() -> dict[str, Any] | None:
        if task_state(airflow, run_id) != "deferred":
            return None
        seen = links(airflow, run_id)
        if seen.get(LINK_NAME) is None or task_state(airflow, run_id) != "deferred":
            return None
        return seen

    assert wait_for(link_while_deferred, timeout=RUN_TIMEOUT, what="the link while the task is deferred") == {
        LINK_NAME: expected
    }
    if ui.link_href(run_id, "deferred") is not None:  # the crew's steps take 5 s: still deferred
        assert ui.link_href(run_id, "deferred-again") == expected
        assert task_state(airflow, run_id) == "deferred", "the page was seen after the wait ended"

    assert wait_for_end(airflow, run_id) == "success", airflow.task_states(DAG_ID, run_id)
    assert service.executions[kickoff_id]["state"] == "SUCCESS"
    assert links(airflow, run_id) == {LINK_NAME: expected}
    assert ui.link_href(run_id, "succeeded") in (expected, None)

    # A run whose crew fails: the failed task still links to its execution.
    failed_run = airflow.trigger(DAG_ID, conf={"topic": "fail"})
    assert wait_for_end(airflow, failed_run) == "failed"
    assert task_state(airflow, failed_run) == "failed"
    (failed_id,) = set(service.executions) - {kickoff_id}
    assert service.executions[failed_id]["state"] == "FAILED"
    assert links(airflow, failed_run) == {LINK_NAME: build_execution_url(TEMPLATE, failed_id)}
    assert ui.link_href(failed_run, "failed") in (build_execution_url(TEMPLATE, failed_id), None)
    for secret in (service.org_token, service.user_token):
        assert secret not in str(links(airflow, failed_run))
