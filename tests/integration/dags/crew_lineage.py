"""A DAG for the execution link and OpenLineage tests (tests/integration/test_openlineage.py and
tests/links/test_crew_link_runs.py).

``kickoff`` keeps its input values and output private (the default); ``kickoff_with_values`` opts
in with ``openlineage_include_values=True``; ``wait_for_crew`` follows the first execution. Both
kickoffs give a human-input webhook whose connection holds a credential that must never reach a
lineage event or a link. ``crew_link_resume`` pauses the review crew and resumes it, so that the
resume operator's link and lineage can be checked too. ``deferrable`` follows ``[operators] default_deferrable``; the topic comes
from ``CREW_LINEAGE_TOPIC`` (``fail`` makes the bundled research crew fail).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor

INPUTS = {"topic": "{{ params.topic }}", "current_year": "{{ params.current_year }}"}

with DAG(
    dag_id="crew_lineage",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"topic": os.environ.get("CREW_LINEAGE_TOPIC", "tidal energy"), "current_year": "2026"},
):
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        inputs=INPUTS,
        human_input_webhook_conn_id="crew_lineage_webhook",
        poll_interval=0.5,
        max_poll_interval=1,
        timeout=300,
    )
    CrewKickoffOperator(
        task_id="kickoff_with_values",
        inputs=INPUTS,
        human_input_webhook_conn_id="crew_lineage_webhook",
        openlineage_include_values=True,
        poll_interval=0.5,
        max_poll_interval=1,
        timeout=300,
    )
    kickoff >> CrewStatusSensor(
        task_id="wait_for_crew", kickoff_id=kickoff.output, poke_interval=0.5, timeout=300
    )

with DAG(
    dag_id="crew_link_resume",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    paused = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_review",
        inputs={"topic": "execution links", "audience": "data engineers"},
        human_input_webhook_conn_id="crew_lineage_webhook",
        on_human_input="return",
        poll_interval=0.5,
        max_poll_interval=1,
    )
    paused >> CrewResumeOperator(
        task_id="approve",
        crew_conn_id="crew_review",
        kickoff_id=paused.output,
        crew_task_id="{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}",
        human_feedback="Approved.",
        is_approve=True,
        poll_interval=0.5,
        max_poll_interval=1,
    )
