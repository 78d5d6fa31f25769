"""DAGs whose waits the crews' webhooks wake (tests/e2e/test_webhook_wake_e2e.py).

Every crew connection here opts in (extra ``wake_by_webhook``); ``crew_webhook_receiver`` points at
the api-server under test. Each DAG uses crews of its own, so the service's counts tell them apart.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor

START = pendulum.datetime(2026, 1, 1, tz="UTC")
RECEIVER = "crew_webhook_receiver"
PAUSED_TASK = "{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}"
SOAK_CREWS = ("soak_2", "soak_10", "soak_20", "soak_30", "soak_40")


def dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, max_active_runs=20)


with dag("wake_kickoff"):
    CrewKickoffOperator(
        task_id="kickoff", crew_conn_id="crew_slow_a", inputs={"topic": "tides"}, deferrable=True
    )

with dag("wake_marked"):  # a user marks it failed while it waits
    CrewKickoffOperator(
        task_id="kickoff", crew_conn_id="crew_marked", inputs={"topic": "tides"}, deferrable=True
    )

with dag("wake_sensor"):
    started = CrewKickoffOperator(
        task_id="kickoff", crew_conn_id="crew_slow_b", inputs={"topic": "tides"}, wait_for_completion=False
    )
    CrewStatusSensor(task_id="wait", crew_conn_id="crew_slow_b", kickoff_id=started.output, deferrable=True)

with dag("wake_resume"):
    paused = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_review_a",
        inputs={"topic": "tides"},
        human_input_webhook_conn_id=RECEIVER,  # pauses are announced to Airflow: they wake the wait
        deferrable=True,
    )
    paused >> CrewResumeOperator(
        task_id="approve",
        crew_conn_id="crew_review_a",
        kickoff_id=paused.output,
        crew_task_id=PAUSED_TASK,
        is_approve=True,
        human_feedback="Fine.",
        deferrable=True,
    )

with dag("wake_quick"):
    CrewKickoffOperator(
        task_id="kickoff", crew_conn_id="crew_quick", inputs={"topic": "tides"}, deferrable=True
    )

with dag("wake_safety"):
    CrewKickoffOperator(
        task_id="kickoff", crew_conn_id="crew_safety", inputs={"topic": "tides"}, deferrable=True
    )

with dag("wake_ended"):
    # The crew ends within the race bound: its trigger ends the kickoff (no worker); what the kickoff
    # pushed must reach a downstream task as the values, as when a worker pushes them.
    ended = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_soak_10",
        inputs={"topic": "tides"},
        deferrable=True,
        # Airflow 3.0 can start a task process before the scheduler's "queued" is visible; the
        # process then fails before running anything ("TI was not in a state where it could be
        # marked as running"). One retry gets past it; the test checks that an earlier try never ran.
        retries=1,
        retry_delay=timedelta(seconds=1),
    )

    @task
    def downstream(kickoff_id: str, result: str, status: dict) -> str:
        assert isinstance(status, dict) and status["kickoff_id"] == kickoff_id, status
        assert not kickoff_id.startswith('"') and not result.startswith('"'), (kickoff_id, result)
        return f"{kickoff_id}: {result}"

    downstream(ended.output, ended.output["result"], ended.output["status"])

with dag("wake_budget"):
    # A crew that spends 500 tokens a second until it is stopped, capped at 20,000: the cap comes 40 s
    # in, after the race bound, when a woken wait polls only every 300 s unless its cap paces it.
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_spender",
        inputs={"topic": "tides"},
        max_tokens=20_000,
        deferrable=True,
        retries=1,  # Airflow 3.0's early start (above); the cap's failure must not use it
        retry_delay=timedelta(seconds=1),
    )

for crew in SOAK_CREWS:  # one DAG per crew length; the soak starts 10 runs of each
    with dag(f"wake_{crew}"):
        CrewKickoffOperator(
            task_id="kickoff", crew_conn_id=f"crew_{crew}", inputs={"topic": "tides"}, deferrable=True
        )

if AIRFLOW_V_3_1_PLUS:  # human review in the UI needs human-in-the-loop (3.1+)
    from airflow_provider_crew.review import crew_human_review

    with dag("wake_review"):
        started = CrewKickoffOperator(
            task_id="kickoff",
            crew_conn_id="crew_review_b",
            inputs={"topic": "tides"},
            human_input_webhook_conn_id=RECEIVER,
            wait_for_completion=False,
        )
        crew_human_review(
            kickoff_id=started.output,
            crew_conn_id="crew_review_b",
            max_rounds=2,
            response_timeout=timedelta(minutes=10),
        )
