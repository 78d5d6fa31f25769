"""DAGs whose crew reaches its budget (used by tests/integration/test_budget_dags.py against a crew that
spends tokens steadily): blocking, deferred, a sensor that may stop, mapped with one cap reached, a cap
from the connection, and a resume after a review round. Every task has retries: none may be used."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor

START = pendulum.datetime(2026, 1, 1, tz="UTC")
INPUTS = {"topic": "budgets"}
CAP = 3000  # tokens: the test's crew spends 2,000 a second, 6,000 before its pause


def with_retries(dag_id: str) -> DAG:
    # Retries that would start paying again: the cap's failure must not use them.
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, default_args={"retries": 2})


with with_retries("crew_budget_blocking"):
    CrewKickoffOperator(task_id="kickoff", inputs=INPUTS, max_tokens=CAP, deferrable=False)

with with_retries("crew_budget_deferred"):
    CrewKickoffOperator(task_id="kickoff", inputs=INPUTS, max_tokens=CAP, deferrable=True)

with with_retries("crew_budget_templated"):
    # The cap rendered from the run's params, and read as text (templates render to text).
    CrewKickoffOperator(
        task_id="kickoff",
        inputs=INPUTS,
        max_tokens="{{ params.cap }}",
        params={"cap": CAP},
        deferrable=True,
    )

with with_retries("crew_budget_from_connection"):
    # No cap on the task: the connection's 'Max tokens per execution' (extra max_usage) applies.
    CrewKickoffOperator(task_id="kickoff", inputs=INPUTS, deferrable=True)

with with_retries("crew_budget_sensor"):
    started = CrewKickoffOperator(task_id="kickoff", inputs=INPUTS, wait_for_completion=False)
    CrewStatusSensor(
        task_id="wait", kickoff_id=started.output, stop_crew=True, max_tokens=CAP, deferrable=True
    )

with with_retries("crew_budget_mapped"):
    # Three executions, one cap each: only the map index whose cap is reached fails.
    CrewKickoffOperator.partial(task_id="kickoff", deferrable=True).expand_kwargs(
        [
            {"inputs": {"topic": "a"}, "max_tokens": 1_000_000},
            {"inputs": {"topic": "b"}, "max_tokens": CAP},
            {"inputs": {"topic": "c"}, "max_tokens": 1_000_000},
        ]
    )


def approve_after_the_pause(dag_id: str, max_tokens: int | str) -> None:
    """A kickoff that returns at the crew's pause, then a resume that approves it, under ``max_tokens``."""
    with with_retries(dag_id):
        paused = CrewKickoffOperator(task_id="kickoff", inputs=INPUTS, deferrable=True)
        CrewResumeOperator(
            task_id="resume",
            kickoff_id=paused.output,
            crew_task_id="{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}",
            human_feedback="Good, go on.",
            is_approve=True,
            max_tokens=max_tokens,
            deferrable=True,
        )


# The resume continues from what the crew spent by its pause (XCom status at a pause), and reaches
# the cap 3,000 tokens later.
approve_after_the_pause(
    "crew_budget_after_review",
    "{{ ti.xcom_pull(task_ids='kickoff', key='status')['usage_metrics']['total_tokens'] + 3000 }}",
)
# The cap is already reached at the pause: the resume is refused before its POST.
approve_after_the_pause("crew_budget_resume_refused", 1)
