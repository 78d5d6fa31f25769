"""DAGs behind a gateway that may have passed a POST on (used by tests/integration/test_post_rule.py).

Each task may retry twice: what the tests check is that an unknown outcome uses none of them, and
that the POST is sent once, so one execution is started and one resume is applied.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=1)}


def two_retries(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, default_args=RETRIES)


# One kickoff DAG per answer in front of the service; the test arms the matching fault.
for case in ("gateway_502", "gateway_503", "gateway_504", "busy_503"):
    with two_retries(f"post_rule_kickoff_{case}"):
        CrewKickoffOperator(
            task_id="kickoff",
            inputs={"topic": f"post rule {case}", "current_year": "2026"},
            poll_interval=0.2,
            max_poll_interval=0.5,
            deferrable=False,
        )

with DAG("post_rule_resume_gateway", schedule=None, start_date=START, catchup=False):
    # The kickoff ends at the pause; the resume (which may retry twice) goes through the gateway.
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_review",
        inputs={"topic": "post rule resume", "audience": "reviewers"},
        human_input_webhook_conn_id="crew_review_webhook",
        on_human_input="return",
        poll_interval=0.2,
        max_poll_interval=0.5,
        deferrable=False,
    )
    CrewResumeOperator(
        task_id="resume",
        crew_conn_id="crew_review",
        kickoff_id=kickoff.output,
        crew_task_id="{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}",
        human_feedback="ship it",
        is_approve=True,
        poll_interval=0.2,
        max_poll_interval=0.5,
        deferrable=False,
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
