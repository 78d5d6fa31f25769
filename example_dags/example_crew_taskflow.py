"""TaskFlow style: a task builds the inputs, the crew returns structured output, a task reads it."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "crew"],
)
def example_crew_taskflow():
    # [START howto_operator_crew_kickoff_taskflow]
    @task
    def choose_inputs() -> dict[str, str]:
        return {"company": "Acme Heat Pumps", "quarter": "Q3"}

    analysis = CrewKickoffOperator(
        task_id="analysis",
        crew_conn_id="crew_structured",
        inputs=choose_inputs(),  # an XComArg: validated against GET /inputs at task start
        poll_interval=1,
    )

    @task
    def summarise(output: dict) -> str:
        # The structured crew answers with result_json, so the output arrives as a dict.
        summary = ", ".join(f"{key}={value!r}" for key, value in sorted(output.items()))
        print(f"Structured output: {summary}")
        return summary

    summarise(analysis.output["result"])
    # [END howto_operator_crew_kickoff_taskflow]


example_crew_taskflow_dag = example_crew_taskflow()


if __name__ == "__main__":
    example_crew_taskflow_dag.test()
