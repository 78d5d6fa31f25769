"""DAGs that exercise retries around a started execution (used by tests/integration/test_retries.py)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator

DEFAULTS = {"retries": 1, "retry_delay": timedelta(seconds=1)}
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def two_retries(dag_id: str) -> DAG:
    """A DAG whose task may retry twice: what these DAGs check is that it does not."""
    return DAG(
        dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    )


with DAG("crew_retry_reattach", schedule=None, start_date=START, catchup=False, default_args=DEFAULTS):
    # The first try times out while the status endpoint is unavailable; the retry must find the
    # execution the first try started instead of starting a second one. (stop_crew=False: the
    # wait's timeout would otherwise stop it, and the retry start anew, as documented.)
    CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "retries", "current_year": "2026"},
        stop_crew=False,
        timeout=3,
        poll_interval=0.5,
        max_poll_interval=0.5,
        deferrable=False,
    )

with two_retries("crew_kickoff_outcome_unknown"):
    # The service starts the execution but the connection drops before the answer: the task must
    # fail without using its retries, so no second execution is started.
    CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "dropped", "current_year": "2026"},
        deferrable=False,
    )

with two_retries("crew_pause_fails"):
    # The crew pauses for human input and the task says a pause fails it: it must fail once, without
    # using its retries, because each retry would start another paid execution that pauses again.
    CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "pauses", "audience": "reviewers"},
        human_input_webhook_conn_id="human_hook",
        on_human_input="fail",
        deferrable=False,
    )

with DAG("crew_resume_retry", schedule=None, start_date=START, catchup=False):
    # The crew pauses on its draft; the resume rejects it, and its try times out (3 s) while the crew
    # redoes the draft (4 s): the retry must follow the execution, not send the feedback again.
    # (stop_crew=False: a try cut off by its wait's timeout would otherwise stop the execution.)
    paused = CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "retries"},
        human_input_webhook_conn_id="human_hook",
        poll_interval=0.5,
        max_poll_interval=0.5,
        deferrable=False,
    )
    CrewResumeOperator(
        task_id="reject",
        kickoff_id=paused.output,
        crew_task_id="{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}",
        human_feedback="Shorter, please",
        is_approve=False,
        stop_crew=False,
        timeout=3,
        poll_interval=0.5,
        max_poll_interval=0.5,
        deferrable=False,
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
