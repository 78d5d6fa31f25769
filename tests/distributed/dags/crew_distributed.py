"""The distributed deployment test's DAG: deferrable and blocking kickoffs, fanned out with ``.expand``.

Every kickoff sends ``meta`` naming its task instance, so the test can check, from the crew
service's own record, that each task instance started exactly one execution. Retries are allowed
(a worker is killed under them); on Airflow 3.3+ a retry must reattach instead of starting again.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

DAG_ID = "crew_distributed"
DEFERRABLE = int(os.environ.get("CREW_DIST_DEFERRABLE", "6"))
BLOCKING = int(os.environ.get("CREW_DIST_BLOCKING", "4"))

common = dict(
    crew_conn_id="crew_default",
    meta={"task_id": "{{ ti.task_id }}", "map_index": "{{ ti.map_index }}"},
    # Short polls keep the test quick once the crews finish; the default grows to 15 s.
    poll_interval=1,
    max_poll_interval=3,
    retries=2,
    retry_delay=timedelta(seconds=2),
)

with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=DEFERRABLE + BLOCKING,
    tags=["test", "crew"],
) as dag:
    CrewKickoffOperator.partial(task_id="deferrable", deferrable=True, **common).expand(
        inputs=[{"topic": f"deferrable {n}"} for n in range(DEFERRABLE)]
    )
    CrewKickoffOperator.partial(task_id="blocking", deferrable=False, **common).expand(
        inputs=[{"topic": f"blocking {n}"} for n in range(BLOCKING)]
    )
