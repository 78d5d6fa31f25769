"""DAGs whose crew executions a user or a fault cuts off (tests/e2e/test_stop_e2e.py and
test_stop_listener_e2e.py).

Each DAG has a crew connection of its own (``crew_<dag's crew>``), so the service's executions tell
the DAGs apart by their crew. Most waits poll every 2-4 s: a finished crew is seen within seconds.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")

# dag_id: (crew, deferrable, poll interval)
DAGS = {
    # A short crew whose trigger ends its task (pushing its XComs through the triggerer's execution
    # API): the triggerer's first such request is slow (the test module says why).
    "stop_deferred_failed": ("deferred_failed", True, 2),  # a user marks the deferred kickoff failed
    # ... before its trigger's first status read (30-60 s after the deferral with this interval)
    "stop_deferred_failed_early": ("deferred_failed_early", True, 60),
    "stop_triggerer_restart": ("triggerer_restart", True, 2),  # its triggerer is killed and replaced
    "stop_blocking_cleared": ("blocking_cleared", False, 2),  # a user clears the running kickoff
    "stop_blocking_failed": ("blocking_failed", False, 2),  # a user marks the running kickoff failed
    # tests/e2e/test_stop_listener_e2e.py: a user marks a deferred kickoff while no triggerer holds
    # its trigger (no triggerer runs, or its triggerer died), or just after it defers
    "stop_unheld": ("unheld", True, 2),
}

for dag_id, (crew, deferrable, poll_interval) in DAGS.items():
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False):
        CrewKickoffOperator(
            task_id="kickoff",
            crew_conn_id=f"crew_{crew}",
            inputs={"topic": "tides"},
            meta={"try_number": "{{ ti.try_number }}"},  # which try started each execution
            deferrable=deferrable,
            poll_interval=poll_interval,
            max_poll_interval=max(poll_interval, 4),
        )
