"""A person reviews a crew's draft in the Airflow UI (Required Actions), round after round.

kickoff (returns at once) -> for each of 3 rounds: review.wait_<n> (a deferred sensor: waits for the
crew to pause) -> review.round_<n> (asks in the UI about that output and sends the answer to the crew;
rounds after the crew finished are skipped) -> review.result (waits for the crew to finish, returns
its output) -> publish.

Needs Airflow 3.1+ (human-in-the-loop); on 3.0 this file fails to parse with a message saying so.

Connections:
- ``crew_review``: the crew (host = base URL, password = bearer token).
- ``crew_review_webhook``: where the service announces the pause (host = URL) and the credential
  it must send there (password = bearer token). Tasks that require human input only pause when
  the kickoff gave such a webhook.
Set ``CREW_EXAMPLE_WEBHOOK_BASE`` to also receive task, step and crew notifications; the review
rounds re-send them with every resume (the service forgets them at resume; docs/contract.md).
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.review import crew_human_review

WEBHOOK_BASE = os.environ.get("CREW_EXAMPLE_WEBHOOK_BASE")
NOTIFICATIONS = (
    {
        kind: f"{WEBHOOK_BASE}/{kind.split('_')[0]}"
        for kind in ("task_webhook_url", "step_webhook_url", "crew_webhook_url")
    }
    if WEBHOOK_BASE
    else {}
)
INPUTS = {"topic": "{{ params.topic }}", "audience": "data engineers"}

with DAG(
    dag_id="example_crew_review_in_airflow",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"topic": "data contracts"},
    tags=["example", "crew", "human-review"],
) as dag:
    # [START howto_crew_review_in_airflow]
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_review",
        inputs=INPUTS,
        human_input_webhook_conn_id="crew_review_webhook",
        wait_for_completion=False,  # the review rounds do the waiting
        **NOTIFICATIONS,
    )

    review = crew_human_review(
        group_id="review",
        kickoff_id=kickoff.output,
        crew_conn_id="crew_review",
        inputs=INPUTS,  # shown to the reviewer as context
        max_rounds=3,  # each "Request changes" uses a round
        response_timeout=timedelta(hours=24),  # then the round fails and stops the execution (stop_crew)
        poll_interval=1,
    )

    @task
    def publish(final_output: str, history: list[dict]) -> str:
        for record in history:
            who = (record.get("responded_by") or {}).get("name")
            print(f"Round {record['round']}: {record['answer']} by {who}: {record['feedback']}")
        print(f"Final output:\n{final_output}")
        return final_output

    # Wired like a task group; like every crew task, review.output is the kickoff id, and its
    # XComs hold the final output ("result") and every round's record ("review_history").
    publish(review.output["result"], review.output["review_history"])
    # [END howto_crew_review_in_airflow]

if __name__ == "__main__":
    dag.test()
