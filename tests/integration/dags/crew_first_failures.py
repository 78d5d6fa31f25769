"""Kickoffs that fail before they know their execution, as a new user's first runs do (issue #49):
``crew_first_bad_token`` runs with whatever token ``crew_default`` holds (the test gives it a wrong
one), ``crew_first_missing_inputs`` leaves out an input the bundled research crew declares. Used by
tests/integration/test_first_failures.py."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def no_retries(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, default_args={"retries": 0})


with no_retries("crew_first_bad_token"):
    CrewKickoffOperator(task_id="kickoff", inputs={"topic": "tides", "current_year": "2026"})

with no_retries("crew_first_missing_inputs"):
    CrewKickoffOperator(task_id="kickoff", inputs={"current_year": "2026"})
