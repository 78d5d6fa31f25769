"""One deferrable kickoff, for tests/links/test_execution_link_e2e.py (real api-server, scheduler,
triggerer). ``conf={"topic": "fail"}`` makes the bundled research crew fail."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

with DAG(
    dag_id="crew_execution_link",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"topic": "tidal energy"},
):
    CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "{{ params.topic }}", "current_year": "2026"},
        deferrable=True,
        poll_interval=1,
        max_poll_interval=2,
        timeout=600,
    )
