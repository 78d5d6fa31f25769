"""A review whose crew never pauses (the kickoff gives no human-input webhook), so its one round
skips, as the demo's last round does once the reviewer approved: used by
tests/integration/test_review_skipped_round.py. Human review needs Airflow 3.1+; on 3.0 the file
defines no DAG."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from airflow_provider_crew.operators.crew import CrewKickoffOperator

if AIRFLOW_V_3_1_PLUS:
    from airflow_provider_crew.review import crew_human_review

    with DAG(
        "crew_review_skipped_round",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": 0},
    ):
        kickoff = CrewKickoffOperator(
            task_id="kickoff", inputs={"topic": "tides", "current_year": "2026"}, wait_for_completion=False
        )
        # Round 1 skips itself (the crew finished); round 2, after it, is skipped without running.
        crew_human_review(group_id="review", kickoff_id=kickoff.output, max_rounds=2, poll_interval=0.5)
