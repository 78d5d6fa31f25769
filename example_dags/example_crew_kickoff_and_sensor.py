"""Start a crew, wait for it with a (deferrable) sensor, use its output downstream.

Connection ``crew_default``: host = the crew's base URL, password = its bearer token.
``deferrable`` follows ``[operators] default_deferrable``, like Airflow's own operators.

From a task to its execution: give the connection an "Execution page URL" (extra
``execution_url_template``, e.g. ``https://app.example.com/executions/{kickoff_id}``) and both tasks
show a **Crew execution** button (the task's Details tab) that opens the execution in the crew's
dashboard, while the sensor is deferred and after it ends.

Lineage: with ``apache-airflow-providers-openlineage`` installed (``airflow-provider-crew[openlineage]``)
each task's COMPLETE and FAIL events carry the execution id, its state, progress and token usage, and
the input names. Input values and outputs are sent only with ``openlineage_include_values=True``.
"""

from __future__ import annotations

# [START howto_crew_quickstart]
import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor

with DAG(
    dag_id="example_crew_kickoff_and_sensor",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"topic": "tidal energy", "current_year": "2026"},
    tags=["example", "crew"],
) as dag:
    # [START howto_operator_crew_kickoff]
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_default",
        inputs={"topic": "{{ params.topic }}", "current_year": "{{ params.current_year }}"},
        wait_for_completion=False,  # the sensor below waits
    )
    # [END howto_operator_crew_kickoff]

    # [START howto_sensor_crew_status]
    wait = CrewStatusSensor(
        task_id="wait_for_crew",
        crew_conn_id="crew_default",
        kickoff_id=kickoff.output,
        poll_interval=1,
        timeout=600,
        openlineage_include_values=False,  # the default: the output may be private
    )
    # [END howto_sensor_crew_status]

    @task
    def report(output: str) -> str:
        print(f"Crew output:\n{output}")
        return output

    # Like every crew task, the sensor returns the kickoff id; the crew's output is XCom "result".
    report(wait.output["result"])
# [END howto_crew_quickstart]


if __name__ == "__main__":
    dag.test()
