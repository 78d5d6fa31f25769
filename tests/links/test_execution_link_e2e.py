"""End to end: the "Crew execution" link in Airflow's REST API, from a real api-server.

Real api-server, scheduler (LocalExecutor), dag-processor and triggerer (tests/e2e/airflow_stack.py)
run a deferrable kickoff against the local crew service, with the connection's execution page URL
template set. The test reads ``GET /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/links``
(what the UI's button shows) while the task is deferred, after it succeeded, and after a run whose
crew failed.

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
from tests.e2e.airflow_stack import AirflowStack, wait_for

pytestmark = pytest.mark.e2e

DAG_FILE = Path(__file__).resolve().parent / "dags" / "crew_execution_link.py"
DAG_ID = "crew_execution_link"
TASK_ID = "kickoff"
LINK_NAME = "Crew execution"
TEMPLATE = "https://dashboard.example.test/crews/research/executions/{kickoff_id}"
RUN_TIMEOUT = 180
# Airflow's bound on a deferring task's process, lowered so that a deferral settles in seconds; the
# provider's settle time before the trigger's first poll follows it.
FAST_SETTLE = {"AIRFLOW__CORE__TASK_SUCCESS_OVERTIME": "5"}


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

    assert wait_for_end(airflow, run_id) == "success", airflow.task_states(DAG_ID, run_id)
    assert service.executions[kickoff_id]["state"] == "SUCCESS"
    assert links(airflow, run_id) == {LINK_NAME: expected}

    # A run whose crew fails: the failed task still links to its execution.
    failed_run = airflow.trigger(DAG_ID, conf={"topic": "fail"})
    assert wait_for_end(airflow, failed_run) == "failed"
    assert task_state(airflow, failed_run) == "failed"
    (failed_id,) = set(service.executions) - {kickoff_id}
    assert service.executions[failed_id]["state"] == "FAILED"
    assert links(airflow, failed_run) == {LINK_NAME: build_execution_url(TEMPLATE, failed_id)}
    for secret in (service.org_token, service.user_token):
        assert secret not in str(links(airflow, failed_run))
