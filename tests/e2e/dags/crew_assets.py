"""A crew task that updates an asset, and a DAG scheduled on that asset (tests/e2e/test_asset_events_e2e.py).

The producer's kickoff is deferrable: a task with ``outlets`` is never ended by its trigger (its asset
event needs a worker), so the worker's ``execute_complete`` records the event. The consumer pushes the
``extra`` of the event that triggered it, which the test reads through the REST API.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
REPORT = Asset("crew://reports/tides")
STARTED = Asset("crew://reports/tides-started")

with DAG(dag_id="asset_producer", schedule=None, start_date=START, catchup=False):
    CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_assets",
        inputs={"topic": "tides"},
        deferrable=True,
        poll_interval=1,
        max_poll_interval=2,
        outlets=[REPORT],
    )
    CrewKickoffOperator(
        task_id="kickoff_no_wait",
        crew_conn_id="crew_assets",
        inputs={"topic": "tides"},
        wait_for_completion=False,
        outlets=[STARTED],
    )


def consumer(dag_id: str, asset: Asset) -> None:
    with DAG(dag_id=dag_id, schedule=[asset], start_date=START, catchup=False):

        @task
        def read_extra(triggering_asset_events=None) -> dict:
            (event,) = triggering_asset_events[asset]
            return dict(event.extra)

        read_extra()


consumer("asset_consumer", REPORT)
consumer("asset_consumer_started", STARTED)
