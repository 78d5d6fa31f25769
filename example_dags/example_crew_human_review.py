"""A human-review loop: the crew drafts, a reviewer asks for changes, the crew redrafts, the reviewer
approves, the crew finishes.

kickoff (returns at the pause) -> request changes (returns at the next pause) -> approve (waits for
completion) -> publish. Here the "reviewer" is two scripted tasks of this DAG, ``request_changes``
and ``approve``; crew_human_review (example_crew_review_in_airflow) puts a person in the Airflow
UI instead.

Connections:
- ``crew_review``: the crew (host = base URL, password = bearer token).
- ``crew_review_webhook``: where the service announces the pause (host = URL) and the credential
  it must send there (password = bearer token; or login + password for basic auth). Any connection
  type works; ``generic`` is built into Airflow. Tasks that require human input only pause when
  such a webhook is given.
Set ``CREW_EXAMPLE_WEBHOOK_BASE`` to also receive task, step and crew notifications; the resume
tasks carry those addresses over (the service forgets them at resume; docs/contract.md).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator

# [START howto_operator_crew_kickoff_webhooks]
WEBHOOK_BASE = os.environ.get("CREW_EXAMPLE_WEBHOOK_BASE")  # e.g. https://hooks.example.com/crew
NOTIFICATIONS = (
    {
        kind: f"{WEBHOOK_BASE}/{kind.split('_')[0]}"  # .../task, .../step, .../crew
        for kind in ("task_webhook_url", "step_webhook_url", "crew_webhook_url")
    }
    if WEBHOOK_BASE
    else {}
)
# [END howto_operator_crew_kickoff_webhooks]

with DAG(
    dag_id="example_crew_human_review",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"topic": "data contracts", "feedback": "Add a section on schema evolution."},
    tags=["example", "crew", "human-review"],
) as dag:
    # [START howto_operator_crew_kickoff_human_input]
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_review",
        inputs={"topic": "{{ params.topic }}", "audience": "data engineers"},
        human_input_webhook_conn_id="crew_review_webhook",
        on_human_input="return",  # end at the pause (the default); the paused task goes to XCom 'human_input'
        poll_interval=1,
        **NOTIFICATIONS,
    )
    # [END howto_operator_crew_kickoff_human_input]

    # The reviewer here is two scripted tasks: request_changes, then approve.
    # [START howto_operator_crew_resume]
    request_changes = CrewResumeOperator(
        task_id="request_changes",
        crew_conn_id="crew_review",
        kickoff_id=kickoff.output,
        crew_task_id="{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}",
        human_feedback="{{ params.feedback }}",
        is_approve=False,
        on_human_input="return",  # the crew redoes the task with the feedback, then pauses again
        poll_interval=1,
    )

    approve = CrewResumeOperator(
        task_id="approve",
        crew_conn_id="crew_review",
        kickoff_id=kickoff.output,
        crew_task_id="{{ ti.xcom_pull(task_ids='request_changes', key='human_input')['task_id'] }}",
        human_feedback="Approved, publish it.",
        is_approve=True,  # then waits for completion (wait_for_completion=True is the default)
        poll_interval=1,
    )
    # [END howto_operator_crew_resume]

    @task
    def publish(first_draft: dict, second_draft: dict, final_output: str) -> str:
        print(f"First draft:\n{first_draft['task_output']}\n")
        print(f"Second draft (after feedback):\n{second_draft['task_output']}\n")
        print(f"Final output:\n{final_output}")
        return final_output

    kickoff >> request_changes >> approve
    publish(
        kickoff.output["human_input"],
        request_changes.output["human_input"],
        approve.output["result"],
    )


if __name__ == "__main__":
    dag.test()
