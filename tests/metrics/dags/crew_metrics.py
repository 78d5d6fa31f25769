"""DAGs whose runs produce every crew metric (tests/metrics): each has a crew connection of its own
(``crew_<dag id without "metrics_">``), so the service's executions tell the DAGs apart by their crew.

The test module arms the faults, answers the review and marks tasks failed; what each DAG is for is
written beside it.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
INPUTS = {"topic": "tides"}


def dag(dag_id: str, retries: int = 1) -> DAG:
    """Airflow 3.0 can start a task process before the scheduler's "queued" is visible; that process
    fails before running anything, and one retry gets past it (tests/e2e/dags/crew_wake.py). A task
    that fails on purpose here has none: a retry would start a second execution."""
    args = {"retries": retries, "retry_delay": timedelta(seconds=1)}
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, default_args=args)


with dag("metrics_over_budget", retries=0):
    # Its crew spends 2,000 tokens a second: the cap (3,000) is reached in the worker's reads before it
    # would defer; the execution is stopped and the task fails: over_budget, ended over_budget, its cost.
    CrewKickoffOperator(
        task_id="kickoff", crew_conn_id="crew_over_budget", inputs=INPUTS, max_tokens=3000, deferrable=True
    )

with dag("metrics_blocking"):
    # Succeeds in its worker after a 429 on its kickoff and a gateway's 502 on a status read: started,
    # ended (succeeded), tokens, duration, status reads, end lag (poll), request.retried busy and gateway.
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_blocking",
        inputs=INPUTS,
        deferrable=False,
        poll_interval=0.5,
        max_poll_interval=1,
    )

with dag("metrics_deferred"):
    # Deferred; its trigger ends the task in the triggerer (no worker after the deferral): ended,
    # tokens, duration, status reads and end lag come from the triggerer, and the retry of a status
    # read the test makes a gateway answer 502 while the trigger polls.
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_deferred",
        inputs=INPUTS,
        deferrable=True,
        poll_interval=2,
        max_poll_interval=2,
    )

with dag("metrics_gateway", retries=0):
    # The kickoff's POST reaches the service, which starts the execution; a gateway answers 502: the
    # outcome is unknown (an alert), the task fails without retry and the execution runs on (an alert).
    CrewKickoffOperator(task_id="kickoff", crew_conn_id="crew_gateway", inputs=INPUTS, deferrable=False)

with dag("metrics_timeout", retries=0):
    # The wait's own timeout ends a blocking wait on a long crew: the worker stops the execution.
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_timeout",
        inputs=INPUTS,
        deferrable=False,
        timeout=3,
        poll_interval=0.5,
        max_poll_interval=0.5,
    )

with dag("metrics_keep", retries=0):
    # The same with stop_crew=False: the execution is left running on purpose (an alert).
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_keep",
        inputs=INPUTS,
        deferrable=False,
        timeout=3,
        poll_interval=0.5,
        max_poll_interval=0.5,
        stop_crew=False,
    )

with dag("metrics_no_stop", retries=0):
    # The same time-out against a service without POST /stop: the stop's answer is no_stop_endpoint
    # and the execution runs on (an alert).
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_no_stop",
        inputs=INPUTS,
        deferrable=False,
        timeout=3,
        poll_interval=0.5,
        max_poll_interval=0.5,
    )

with dag("metrics_marked_failed", retries=0):
    # Deferred on a long crew and polled every 60 s (the Crew tab's read in the api-server meets no
    # poll of the trigger's); a user marks it failed: the triggerer stops the execution.
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_marked_failed",
        inputs=INPUTS,
        deferrable=True,
        poll_interval=60,
        max_poll_interval=60,
    )

# A metrics setup that raises for these DAGs' crew metrics (airflow_path/refusing_stat_names.py): each
# must succeed all the same, ended in its worker and by its trigger.
with dag("metrics_broken_blocking"):
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_broken_blocking",
        inputs=INPUTS,
        deferrable=False,
        poll_interval=0.5,
        max_poll_interval=1,
    )

with dag("metrics_broken_deferred"):
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_broken_deferred",
        inputs=INPUTS,
        deferrable=True,
        poll_interval=2,
        max_poll_interval=2,
    )
