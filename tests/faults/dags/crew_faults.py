"""The fault suite's DAGs: one per fault, each on a crew and a connection of its own.

Every kickoff sends ``meta`` naming its DAG run and task instance, so the suite can count, from
the crew service's own record, how many executions each task instance started. Retries are
allowed everywhere: a row whose fault should cost no retry checks that none was used.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

# dag_id: (connection, deferrable tasks, blocking tasks, retries, retry delay in seconds)
SCENARIOS = {
    "fault_triggerer": ("crew_triggerer", 4, 0, 2, 2),
    "fault_task": ("crew_task", 0, 2, 2, 2),
    "fault_scheduler": ("crew_scheduler", 2, 2, 2, 2),
    "fault_outage_503": ("crew_outage_503", 2, 1, 2, 2),
    # A kickoff that meets connection refused fails its try once retry_limit is used up (a few
    # seconds); Airflow's retries carry it through the rest of the outage.
    "fault_outage_refused": ("crew_outage_refused", 2, 1, 8, 20),
    "fault_garbage_status": ("crew_garbage", 2, 2, 2, 2),
    "fault_garbage_kickoff": ("crew_garbage_kickoff", 0, 2, 2, 2),
    "fault_slow_status": ("crew_slow", 2, 1, 2, 2),
    "fault_burst_429": ("crew_burst", 0, 100, 2, 2),
}

for dag_id, (conn_id, deferrable, blocking, retries, retry_delay) in SCENARIOS.items():
    common = dict(
        crew_conn_id=conn_id,
        meta={
            "dag_id": dag_id,
            "run_id": "{{ run_id }}",
            "task_id": "{{ ti.task_id }}",
            "map_index": "{{ ti.map_index }}",
            "try_number": "{{ ti.try_number }}",  # which try started an execution
        },
        # Short polls keep the suite quick once the crews finish; the default grows to 15 s.
        poll_interval=1,
        max_poll_interval=3,
        timeout=1800,
        retries=retries,
        retry_delay=timedelta(seconds=retry_delay),
    )
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_tasks=max(deferrable + blocking, 1),
        max_active_runs=4,
        tags=["test", "crew", "faults"],
    ) as dag:
        if deferrable:
            CrewKickoffOperator.partial(task_id="deferrable", deferrable=True, **common).expand(
                inputs=[{"topic": f"deferrable {n}"} for n in range(deferrable)]
            )
        if blocking:
            CrewKickoffOperator.partial(task_id="blocking", deferrable=False, **common).expand(
                inputs=[{"topic": f"blocking {n}"} for n in range(blocking)]
            )
    globals()[dag_id] = dag
