"""A review round that skips because the crew finished logs nothing at error level (issue #49: the
demo's log had an "XCom not found" error for its skipped last round, which the review's result task
reads with the others). A real DAG run (``airflow dags test``) against the local crew service."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from airflow_provider_crew.testing.dag_runs import airflow_env, dags_test, migrate_db

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="human review needs Airflow 3.1+"),
]

DAG_FILE = Path(__file__).parent / "dags" / "crew_review_skipped.py"


def test_a_round_skipped_because_the_crew_finished_logs_no_error(tmp_path, crew_service):
    home, dags = tmp_path / "home", tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    env = airflow_env(home, dags, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="False")
    migrate_db(env)
    env.update(crew_service.connection_env("crew_default"))

    run = dags_test("crew_review_skipped_round", env, check=False)

    assert run.state == "success", run.stdout[-3000:]
    states = run.task_states()
    assert states[("review.round_1", -1)] == "skipped"
    assert states[("review.round_2", -1)] == "skipped"  # never ran: the result task reads no XCom of it
    assert states[("review.result", -1)] == "success"
    (kickoff_id,) = crew_service.executions
    assert f"Crew execution {kickoff_id} finished: no review round 1." in run.stdout
    assert run.xcom("review.result", "review_history") == []  # the skipped round has no record
    errors = [line for line in run.stdout.splitlines() if "[error" in line or "XCom not found" in line]
    assert errors == [], errors
