"""TaskFlow with ``@task.crew``: a function returns the crew's inputs; the task starts the crew and waits.

The decorator takes every ``CrewKickoffOperator`` parameter (``crew_conn_id``, ``deferrable``,
``poll_interval``...); ``.expand()`` maps over the function's arguments. The task returns the kickoff
id; ``["result"]`` is the crew's final output.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

TOPICS = ["tides", "glaciers", "volcanoes"]


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "crew"],
)
def example_crew_task_decorator():
    # [START howto_decorator_crew_task]
    @task.crew(crew_conn_id="crew_default", poll_interval=1)
    def research(topic: str, current_year: str = "2026") -> dict[str, str]:
        # Runs in the worker when the task starts; what it returns is the crew's inputs.
        return {"topic": topic, "current_year": current_year}

    overview = research.override(task_id="overview")("ocean energy")
    details = research.expand(topic=TOPICS)  # one execution per topic

    @task
    def publish(overview: str | None, details: list[str | None]) -> dict[str, str | None]:
        # Position i of a mapped task's ["result"] is map index i; None where that execution paused.
        report = {"overview": overview, **dict(zip(TOPICS, details, strict=True))}
        for name, output in report.items():
            print(f"{name}: {output[:200] if output is not None else '(paused: see its human_input XCom)'}")
        return report

    publish(overview["result"], details["result"])
    # [END howto_decorator_crew_task]


example_crew_task_decorator_dag = example_crew_task_decorator()


if __name__ == "__main__":
    example_crew_task_decorator_dag.test()
