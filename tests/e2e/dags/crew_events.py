"""DAGs whose crews report through the event stream (tests/e2e/test_event_stream_e2e.py).

Every crew connection here opts in (extras ``wake_by_webhook`` and ``event_stream``);
``crew_webhook_receiver`` points at the api-server under test. Each DAG uses a crew of its own.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew.operators.crew import CrewKickoffOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def kickoff(dag_id: str, crew: str, **more: object) -> None:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, max_active_runs=5):
        CrewKickoffOperator(
            task_id="kickoff",
            crew_conn_id=f"crew_{crew}",
            inputs={"topic": "tides"},
            deferrable=True,
            retries=0,
            **more,  # type: ignore[arg-type]
        )


kickoff("events_fail", "fails_late")  # fails 60 s in: only the event stream tells
kickoff("events_silent", "silent")  # fails 60 s in, and its service sends no events
kickoff("events_budget", "bursty", max_tokens=300)  # idle, then spends past its cap in a burst
kickoff("events_unordered", "unordered")  # succeeds; its events come shuffled and repeated
