"""DAGs whose crew task's wait is ended by something other than the crew, which must stop the execution
(used by tests/integration/test_stop_dags.py against a slow crew that runs far longer than the waits)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
INPUTS = {"topic": "stopping"}
POLLING = {"poll_interval": 0.5, "max_poll_interval": 0.5}


def no_retries(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, default_args={"retries": 0})


with no_retries("crew_stop_execution_timeout"):
    # Airflow's execution_timeout (3 s) kills the blocking wait: on_kill stops the execution.
    CrewKickoffOperator(
        task_id="kickoff",
        inputs=INPUTS,
        execution_timeout=timedelta(seconds=3),
        deferrable=False,
        **POLLING,
    )

with no_retries("crew_stop_wait_timeout"):
    # The wait's own timeout (2 s) ends the blocking wait: the task stops the execution, then fails.
    CrewKickoffOperator(task_id="kickoff", inputs=INPUTS, timeout=2, deferrable=False, **POLLING)

with no_retries("crew_keep_wait_timeout"):
    # The same, with stop_crew=False: the task fails and leaves the execution running.
    CrewKickoffOperator(
        task_id="kickoff", inputs=INPUTS, timeout=2, deferrable=False, stop_crew=False, **POLLING
    )

with no_retries("crew_stop_wait_timeout_deferred"):
    # The same timeout in a trigger: the worker resumes with the time-out event and stops the execution.
    CrewKickoffOperator(task_id="kickoff", inputs=INPUTS, timeout=2, deferrable=True, **POLLING)
