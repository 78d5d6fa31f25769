"""An execution that started is never started twice by a retry, in real DAG runs."""

from __future__ import annotations

import json
import re
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_3_PLUS
from airflow_provider_crew.testing import wait_until
from airflow_provider_crew.testing.dag_runs import airflow_env, dags_test, migrate_db

pytestmark = pytest.mark.integration

DAGS = Path(__file__).parent / "dags"


@pytest.fixture(scope="module")
def retries_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow-home-retries")
    migrate_db(airflow_env(home, DAGS))
    return home


def run(home: Path, crew_service, dag_id: str, *, check: bool = True):
    env = airflow_env(home, DAGS)
    # No HTTP-level retries (not for errors, not for 429/503 within a budget): each poll is one
    # request, and a kickoff whose answer is lost is not repeated by the hook.
    env.update(crew_service.connection_env("crew_default", retry_limit=0, retry_budget=0))
    return dags_test(dag_id, env, check=check)


def first_try_failed(home: Path, dag_id: str) -> bool:
    """Airflow recorded the end of the task's first try (it archives a retried try's row)."""
    with sqlite3.connect(home / "airflow.db", timeout=30) as db:
        (archived,) = db.execute(
            "SELECT count(*) FROM task_instance_history WHERE dag_id=?", (dag_id,)
        ).fetchone()
        (waiting,) = db.execute(
            "SELECT count(*) FROM task_instance WHERE dag_id=? AND state='up_for_retry'", (dag_id,)
        ).fetchone()
    return archived + waiting > 0


def test_a_retry_reattaches_to_the_execution_instead_of_starting_another(retries_home, crew_service):
    # The status endpoint is down until the first try has timed out (3 s), however slowly the
    # machine runs it; then it recovers, so the retry's wait succeeds.
    crew_service.faults.unavailable(count=None, endpoint="status")
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(run, retries_home, crew_service, "crew_retry_reattach")
        wait_until(
            lambda: running.done() or first_try_failed(retries_home, "crew_retry_reattach"),
            timeout=240,
            interval=0.2,
            message="the first try to fail",
        )
        crew_service.faults.clear()
        result = running.result(timeout=300)

    assert result.state == "success", result.stdout[-4000:]
    assert result.task_states() == {("kickoff", -1): "success"}
    assert "Timed out waiting for crew execution" in result.stdout  # the first try failed after kickoff
    if AIRFLOW_V_3_3_PLUS:
        assert crew_service.request_count("kickoff") == 1
        assert "Reattaching to crew execution" in result.stdout
        (kickoff_id,) = crew_service.executions
        assert result.xcom("kickoff") == kickoff_id
        # The retry's XCom holds the first try's kickoff time again: a wait downstream counts its
        # 404 grace from it.
        kicked_off_at = result.xcom("kickoff", "kicked_off_at")
        assert kicked_off_at["kickoff_id"] == kickoff_id
        assert abs(kicked_off_at["epoch_seconds"] - crew_service.executions[kickoff_id]["created_at"]) < 5
    else:
        # Documented limit: no task state store before 3.3, so the retry starts a new execution.
        assert crew_service.request_count("kickoff") == 2


def test_a_kickoff_whose_outcome_is_unknown_fails_without_retry(retries_home, crew_service):
    crew_service.faults.drop_after(endpoint="kickoff", count=1)

    result = run(retries_home, crew_service, "crew_kickoff_outcome_unknown", check=False)

    assert result.state == "failed"
    assert result.task_states() == {("kickoff", -1): "failed"}
    assert "outcome is unknown" in result.stdout and "Failing without retry" in result.stdout
    assert crew_service.request_count("kickoff") == 1
    assert len(crew_service.executions) == 1  # started once, by the dropped request, and never again


def test_a_pause_under_on_human_input_fail_fails_once_without_starting_another_execution(
    retries_home, crew_service, crew_webhooks
):
    env = airflow_env(retries_home, DAGS)
    env.update(crew_service.connection_env("crew_default", crew="review", retry_limit=0, retry_budget=0))
    env["AIRFLOW_CONN_HUMAN_HOOK"] = json.dumps(
        {"conn_type": "generic", "host": crew_webhooks.url_for("human"), "password": "hook-token-1"}
    )

    result = dags_test("crew_pause_fails", env, check=False)

    assert result.state == "failed"
    assert result.task_states() == {("kickoff", -1): "failed"}  # failed, not up_for_retry: retries=2 unused
    assert crew_service.request_count("kickoff") == 1  # exactly one paid execution
    (kickoff_id,) = crew_service.executions
    assert crew_service.executions[kickoff_id]["state"] == "PAUSED"  # left paused, named in the log
    # Airflow 3.0 prints the error in a boxed, wrapped traceback: read it as flowing text.
    said = " ".join(re.sub(r"[\u2500-\u257f]", " ", result.stdout).split())
    assert f"Crew execution {kickoff_id} paused for human input" in said
    assert "fails without retry" in said
    assert not first_try_failed(retries_home, "crew_pause_fails")  # no second try was ever made


SLOW_REVIEW = {
    "name": "slow_review",
    "inputs": ["topic"],
    "pending_seconds": 0.05,
    "step_seconds": 2,
    "tasks": [
        {"name": "draft_task", "agent": "Writer", "steps": 2, "human_input": True},
        {"name": "publish_task", "agent": "Editor", "steps": 1},
    ],
}


@pytest.mark.crew_service(SLOW_REVIEW)
def test_a_retry_of_a_resume_whose_feedback_went_through_does_not_send_it_again(
    retries_home, crew_service, crew_webhooks
):
    env = airflow_env(retries_home, DAGS)
    env.update(crew_service.connection_env("crew_default", crew="slow_review", retry_limit=0, retry_budget=0))
    env["AIRFLOW_CONN_HUMAN_HOOK"] = json.dumps(
        {"conn_type": "generic", "host": crew_webhooks.url_for("human"), "password": "hook-token-2"}
    )

    result = dags_test("crew_resume_retry", env, check=False)

    assert result.state == "success", result.stdout[-4000:]
    assert result.task_states() == {("kickoff", -1): "success", ("reject", -1): "success"}
    assert "Timed out waiting for crew execution" in result.stdout  # try 1 ended during the redo
    assert first_try_failed(retries_home, "crew_resume_retry")
    (kickoff_id,) = crew_service.executions
    assert crew_service.request_count("resume") == 1  # the feedback was sent once
    assert len(crew_service.executions[kickoff_id]["feedback"]) == 1  # and the crew redid its draft once
    assert (
        "Not sending the feedback again" in result.stdout
        or "An earlier try of this task sent" in result.stdout
    )
