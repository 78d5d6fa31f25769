"""Fan out: one crew execution per topic with ``.expand``, then collect every output."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator

TOPICS = ["tides", "glaciers", "volcanoes"]

with DAG(
    dag_id="example_crew_mapped",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "crew"],
) as dag:
    # [START howto_operator_crew_kickoff_mapped]
    research = CrewKickoffOperator.partial(
        task_id="research",
        crew_conn_id="crew_default",
        poll_interval=1,
    ).expand(inputs=[{"topic": topic, "current_year": "2026"} for topic in TOPICS])

    @task
    def collect(outputs: list[str | None]) -> dict[str, str | None]:
        # Position i is map index i: an execution that paused for human input gives None in its place.
        collected = dict(zip(TOPICS, outputs, strict=True))
        for topic, output in collected.items():
            print(f"{topic}: {output[:200] if output is not None else '(paused: see its human_input XCom)'}")
        return collected

    collect(research.output["result"])
    # [END howto_operator_crew_kickoff_mapped]


if __name__ == "__main__":
    dag.test()
