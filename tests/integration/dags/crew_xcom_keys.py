"""DAGs whose TaskFlow tasks take a crew task's XComs as arguments (tests/integration/test_xcom_keys.py).

A key a wait's end leaves out reads as None downstream, as ``xcom_pull`` gives it: ``result`` after a
kickoff that ended at a pause, ``human_input`` after one that ended finished. Each consumer fails its
task unless it gets what the docs say. ``deferrable`` follows ``[operators] default_deferrable``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
FAST = {"poll_interval": 0.5, "max_poll_interval": 1, "timeout": 300}


@task
def expect_none(value):
    assert value is None, f"expected None, got {value!r}"
    return "got None"


@task
def expect_paused_task(value):
    assert isinstance(value, dict) and value["task_id"], value
    return value["task_id"]


@task
def expect_output(value):
    assert isinstance(value, str) and value.startswith("reporting_task by Reporting Analyst"), value
    return len(value)


with DAG("crew_xcom_keys_paused", schedule=None, start_date=START, catchup=False):
    # The review crew pauses for human input; on_human_input="return" ends the task there.
    paused = CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_review",
        inputs={"topic": "tides", "audience": "reviewers"},
        human_input_webhook_conn_id="human_hook",
        **FAST,
    )
    expect_none.override(task_id="result_is_none")(paused.output["result"])
    expect_none.override(task_id="usage_is_none")(paused.output["usage"])
    expect_paused_task.override(task_id="human_input")(paused.output["human_input"])

with DAG("crew_xcom_keys_finished", schedule=None, start_date=START, catchup=False):
    finished = CrewKickoffOperator(
        task_id="kickoff", inputs={"topic": "tidal energy", "current_year": "2026"}, **FAST
    )
    expect_none.override(task_id="human_input_is_none")(finished.output["human_input"])
    expect_output.override(task_id="result")(finished.output["result"])


TOPICS = ["tides", "glaciers", "volcanoes"]


@task
def pair(results, human_inputs, usages, statuses, **context):
    """Position i is map index i, however the keys are read: the middle instance paused."""
    pulled = context["ti"].xcom_pull(task_ids="kickoff", key="result", map_indexes=[0, 1, 2])
    assert list(results) == pulled, (results, pulled)
    assert [value is None for value in results] == [False, True, False], results
    assert [value is None for value in human_inputs] == [True, False, True], human_inputs
    assert [value is None for value in usages] == [False, True, False], usages
    assert [status["state"] for status in statuses] == ["SUCCESS", "PAUSED", "SUCCESS"], statuses
    paired = dict(zip(TOPICS, results, strict=True))
    assert "tides" in paired["tides"] and "volcanoes" in paired["volcanoes"], paired
    return {topic: output is not None for topic, output in paired.items()}


with DAG("crew_xcom_keys_mapped", schedule=None, start_date=START, catchup=False):
    # Three executions of the review crew; only the middle one gets a human-input webhook, so only it
    # pauses (on_human_input="return" ends its task there) while the others finish.
    mapped = CrewKickoffOperator.partial(task_id="kickoff", crew_conn_id="crew_review", **FAST).expand_kwargs(
        [
            {
                "inputs": {"topic": topic, "audience": "reviewers"},
                "human_input_webhook_conn_id": "human_hook" if topic == "glaciers" else None,
            }
            for topic in TOPICS
        ]
    )
    pair(
        mapped.output["result"], mapped.output["human_input"], mapped.output["usage"], mapped.output["status"]
    )
