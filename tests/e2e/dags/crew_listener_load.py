"""A DAG of many deferred crew waits, for marks through the REST API under load
(tests/e2e/test_listener_load.py).

One run maps its kickoff over ``marks`` inputs (the run's conf): that many deferrable kickoffs of one
long crew, each deferred to the triggerer as soon as the executor runs it. The kickoff's meta names its
map index, so each of the service's executions tells which task instance waits on it.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator

DAG_ID = "listener_load"

with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"marks": 40},
    # Not the default 16: every mapped kickoff may be deferred at once.
    max_active_tasks=1024,
):

    @task
    def topics(params: dict[str, Any] | None = None) -> list[dict[str, str]]:
        return [{"topic": f"load {number}"} for number in range(int((params or {})["marks"]))]

    CrewKickoffOperator.partial(
        task_id="kickoff",
        crew_conn_id="crew_listener_load",
        meta={"map_index": "{{ ti.map_index }}"},
        deferrable=True,
        # Every trigger reads its crew's status every 5-15 s: the triggerer is busy with them all.
        poll_interval=5,
        max_poll_interval=15,
    ).expand(inputs=topics())
