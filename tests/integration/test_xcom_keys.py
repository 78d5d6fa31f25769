"""Every XCom key a wait's end may leave out reads as None for a TaskFlow task that takes it, in real
DAG runs (``airflow dags test``) against the local crew service, blocking and deferred; and the
final output is stored once in XCom."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from airflow_provider_crew.testing.dag_runs import airflow_env, dags_test, migrate_db

pytestmark = pytest.mark.integration

DAGS = Path(__file__).parent / "dags"


@pytest.fixture(scope="module")
def xcom_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow-home-xcom-keys")
    migrate_db(airflow_env(home, DAGS))
    return home


def run(home: Path, crew_service, crew_webhooks, dag_id: str, *, deferrable: bool):
    env = airflow_env(home, DAGS, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=str(deferrable))
    env.update(crew_service.connection_env("crew_default"))
    env.update(crew_service.connection_env("crew_review", crew="review"))
    env["AIRFLOW_CONN_HUMAN_HOOK"] = json.dumps(
        {"conn_type": "generic", "host": crew_webhooks.url_for("human"), "password": "hook-token-1"}
    )
    return dags_test(dag_id, env, check=False)


def xcom_sizes(home: Path, dag_id: str, run_id: str, task_id: str) -> dict[str, int]:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT key, length(value) FROM xcom WHERE dag_id=? AND run_id=? AND task_id=?",
            (dag_id, run_id, task_id),
        ).fetchall()
    return dict(rows)


@pytest.mark.parametrize("deferrable", [False, True], ids=["blocking", "deferred"])
def test_after_a_pause_result_and_usage_are_none_downstream(
    xcom_home, crew_service, crew_webhooks, deferrable
):
    result = run(xcom_home, crew_service, crew_webhooks, "crew_xcom_keys_paused", deferrable=deferrable)

    assert result.task_states()[("kickoff", -1)] == "success", result.stdout[-4000:]
    sizes = xcom_sizes(xcom_home, result.dag_id, result.run_id, "kickoff")
    assert "human_input" in sizes and "result" not in sizes and "usage" not in sizes
    assert result.task_states() == {
        ("kickoff", -1): "success",
        ("result_is_none", -1): "success",
        ("usage_is_none", -1): "success",
        ("human_input", -1): "success",
    }, result.stdout[-4000:]
    assert result.state == "success"
    assert result.xcom("result_is_none") == "got None"
    (kickoff_id,) = crew_service.executions
    assert result.xcom("human_input") == crew_service.executions[kickoff_id]["task_ids"]["draft_task"]
    # The paused task's output is stored once, in human_input; status keeps the rest of the record.
    paused_task = result.xcom("kickoff", "human_input")
    status = result.xcom("kickoff", "status")
    assert paused_task["task_output"] and status["state"] == "PAUSED"
    assert status["last_executed_task"]["task_id"] == paused_task["task_id"]
    assert "output" not in status["last_executed_task"], status


@pytest.mark.parametrize("deferrable", [False, True], ids=["blocking", "deferred"])
def test_after_an_end_human_input_is_none_downstream_and_the_output_is_stored_once(
    xcom_home, crew_service, crew_webhooks, deferrable
):
    result = run(xcom_home, crew_service, crew_webhooks, "crew_xcom_keys_finished", deferrable=deferrable)

    assert result.task_states()[("kickoff", -1)] == "success", result.stdout[-4000:]
    (kickoff_id,) = crew_service.executions
    output = crew_service.executions[kickoff_id]["result"]
    assert result.xcom("kickoff", "result") == output
    status = result.xcom("kickoff", "status")
    assert status["state"] == "SUCCESS"
    assert "result" not in status and "result_json" not in status
    assert "output" not in status["last_executed_task"]
    assert output not in json.dumps(status)  # stored once: in "result"
    assert "human_input" not in xcom_sizes(xcom_home, result.dag_id, result.run_id, "kickoff")
    assert result.task_states() == {
        ("kickoff", -1): "success",
        ("human_input_is_none", -1): "success",
        ("result", -1): "success",
    }, result.stdout[-4000:]
    assert result.state == "success"


@pytest.mark.parametrize("deferrable", [False, True], ids=["blocking", "deferred"])
def test_a_mapped_kickoffs_keys_pair_with_its_map_indexes_when_one_instance_pauses(
    xcom_home, crew_service, crew_webhooks, deferrable
):
    result = run(xcom_home, crew_service, crew_webhooks, "crew_xcom_keys_mapped", deferrable=deferrable)

    states = result.task_states()
    assert [states[("kickoff", index)] for index in range(3)] == ["success"] * 3, result.stdout[-4000:]
    assert states[("pair", -1)] == "success", result.stdout[-4000:]
    assert result.xcom("pair") == {"tides": True, "glaciers": False, "volcanoes": True}
    for index, topic in enumerate(["tides", "glaciers", "volcanoes"]):
        kickoff_id = result.xcom("kickoff", map_index=index)
        assert crew_service.executions[kickoff_id]["inputs"]["topic"] == topic
