"""A crew task whose wait something other than the crew ends stops the execution (``POST /stop``), in
real DAG runs (``airflow dags test``) against the local crew service running a slow crew: Airflow's
``execution_timeout``, the wait's own ``timeout`` (blocking and deferred), ``stop_crew=False``, and a
service without ``/stop`` (docs/reliability.md, "Stopping what nobody waits for")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_crew.testing.dag_runs import airflow_env, dags_test, migrate_db

pytestmark = pytest.mark.integration

DAGS = Path(__file__).parent / "dags"

# Runs for two minutes: every wait below ends (2-3 s) long before the crew does.
SLOW_CREW = {
    "name": "slow_crew",
    "inputs": ["topic"],
    "pending_seconds": 0.05,
    "step_seconds": 2,
    "tasks": [{"name": "research_task", "agent": "Researcher", "steps": 60}],
}

EXECUTION_TIMEOUT = "the task's execution_timeout passed"
WAIT_TIMEOUT = "the wait's timeout passed"


@pytest.fixture(scope="module")
def stop_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow-home-stop")
    migrate_db(airflow_env(home, DAGS))
    return home


def run(home: Path, crew_service, dag_id: str):
    env = airflow_env(home, DAGS)
    env.update(crew_service.connection_env("crew_default", retry_limit=0, retry_budget=0))
    return dags_test(dag_id, env, check=False)


def stop_lines(stdout: str, kickoff_id: str) -> list[str]:
    """The log lines about stopping the execution (the task's error, which says what came of the stop
    in other words, is not one)."""
    return [
        line
        for line in stdout.splitlines()
        if kickoff_id in line and re.search(r"(Stopping|Not stopping|Could not stop) crew execution", line)
    ]


def stop_records(stdout: str, kickoff_id: str) -> list[str]:
    """:func:`stop_lines`, one per log record: Airflow 3.0's ``dags test`` prints each task log record
    twice (two handlers), 3.3 once; the one "Started crew execution" record tells how many times."""
    lines = stop_lines(stdout, kickoff_id)
    copies = sum(f"Started crew execution {kickoff_id}" in line for line in stdout.splitlines())
    assert copies in (1, 2), stdout[-4000:]
    assert len(lines) % copies == 0, lines
    return lines[::copies]


def xcom_or_none(result, task_id: str, key: str):
    try:
        return result.xcom(task_id, key)
    except KeyError:
        return None


def the_execution(crew_service) -> str:
    (kickoff_id,) = crew_service.executions  # started once
    return kickoff_id


@pytest.mark.crew_service(SLOW_CREW)
def test_execution_timeout_stops_a_blocking_kickoff(stop_home, crew_service):
    result = run(stop_home, crew_service, "crew_stop_execution_timeout")

    assert result.task_states() == {("kickoff", -1): "failed"}, result.stdout[-4000:]
    assert result.state == "failed"
    assert "AirflowTaskTimeout" in result.stdout  # Airflow's execution_timeout ended it, not the wait's
    kickoff_id = the_execution(crew_service)
    assert crew_service.stops == [kickoff_id], result.stdout[-4000:]
    assert crew_service.executions[kickoff_id]["state"] == "REVOKED"
    line = f"Stopping crew execution {kickoff_id} ({EXECUTION_TIMEOUT}): stopped."
    assert line in result.flowing(), result.stdout[-4000:]
    assert len(stop_records(result.stdout, kickoff_id)) == 1


@pytest.mark.crew_service(SLOW_CREW)
@pytest.mark.parametrize(
    "dag_id", ["crew_stop_wait_timeout", "crew_stop_wait_timeout_deferred"], ids=["blocking", "deferred"]
)
def test_the_wait_timeout_stops_the_execution(stop_home, crew_service, dag_id):
    result = run(stop_home, crew_service, dag_id)

    assert result.task_states() == {("kickoff", -1): "failed"}, result.stdout[-4000:]
    assert result.state == "failed"
    said = result.flowing()
    kickoff_id = the_execution(crew_service)
    assert f"Timed out waiting for crew execution {kickoff_id}" in said, result.stdout[-4000:]
    assert crew_service.stops == [kickoff_id], result.stdout[-4000:]
    assert crew_service.executions[kickoff_id]["state"] == "REVOKED"
    assert f"Stopping crew execution {kickoff_id} ({WAIT_TIMEOUT}): stopped." in said
    (line,) = stop_records(result.stdout, kickoff_id)
    assert "Stopping the execution: stopped." in said  # the task's error says so too
    if dag_id.endswith("deferred"):
        # The trigger ran inline and fired its time-out; the worker, resumed with it, stopped the execution:
        # the one stop line comes after the trigger completed (a trigger stops only when cancelled, and
        # the task and the trigger log it through the same hooks.stop.stop).
        deferred = result.stdout.index("Pausing task as DEFERRED")
        fired = result.stdout.index("[DAG TEST] Trigger completed")
        assert deferred < fired < result.stdout.index(line), result.stdout[-4000:]
        assert "CrewStatusTrigger" not in line  # where a record names its logger (3.3), it is the task's
    status = result.xcom("kickoff", "status")
    assert status["stopped"] == {"reason": WAIT_TIMEOUT, "answer": "stopped"}
    assert status["state"] == "RUNNING"  # the last state the wait read, before the stop


@pytest.mark.crew_service(SLOW_CREW)
def test_the_wait_timeout_leaves_the_execution_running_with_stop_crew_false(stop_home, crew_service):
    result = run(stop_home, crew_service, "crew_keep_wait_timeout")

    assert result.task_states() == {("kickoff", -1): "failed"}, result.stdout[-4000:]
    said = result.flowing()
    kickoff_id = the_execution(crew_service)
    assert f"Timed out waiting for crew execution {kickoff_id}" in said, result.stdout[-4000:]
    assert "The execution was not stopped (stop_crew) and may still be running." in said
    assert crew_service.request_count("stop") == 0
    assert crew_service.stops == []
    assert crew_service.executions[kickoff_id]["state"] == "RUNNING"
    assert stop_lines(result.stdout, kickoff_id) == []
    assert "stopped" not in (xcom_or_none(result, "kickoff", "status") or {})


@pytest.mark.crew_service(SLOW_CREW, stop_endpoint="absent")
def test_a_service_without_stop_fails_the_task_on_its_timeout_only(stop_home, crew_service):
    result = run(stop_home, crew_service, "crew_stop_wait_timeout")

    assert result.task_states() == {("kickoff", -1): "failed"}, result.stdout[-4000:]
    said = result.flowing()
    kickoff_id = the_execution(crew_service)
    assert f"Timed out waiting for crew execution {kickoff_id}" in said, result.stdout[-4000:]
    # Asked once; the service has no such route, so it counts it as "other" and answers 404.
    assert crew_service.request_count("other") == 1
    assert crew_service.counters["responses"]["other"] == {"404": 1}
    assert crew_service.stops == []
    assert crew_service.executions[kickoff_id]["state"] == "RUNNING"  # it runs on
    (line,) = stop_records(result.stdout, kickoff_id)
    assert f"Stopping crew execution {kickoff_id} ({WAIT_TIMEOUT}): not supported by this service" in line
    assert "has no POST /stop" in line
    assert "Could not stop" not in said  # the stop raised nothing: the task failed on its timeout
    assert result.xcom("kickoff", "status")["stopped"]["answer"] == "not supported by this service"
