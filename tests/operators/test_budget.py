"""A cap on a crew task: checked at DAG parse naming the parameter, templated on every task that has it,
carried to the trigger as JSON primitives. The caps reached in real DAG runs: tests/integration/test_budget_dags.py."""

from __future__ import annotations

import json

import pytest

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor
from airflow_provider_crew.triggers.crew import CrewStatusTrigger
from airflow_provider_crew.waiting.budget import Budget, Prices, SpendingPace

KICKOFF_ID = "0b6f3c1e-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    "make",
    [
        lambda **caps: CrewKickoffOperator(task_id="k", inputs={"topic": "x"}, **caps),
        lambda **caps: CrewResumeOperator(
            task_id="r", kickoff_id=KICKOFF_ID, crew_task_id="t", is_approve=True, **caps
        ),
        lambda **caps: CrewStatusSensor(task_id="s", kickoff_id=KICKOFF_ID, stop_crew=True, **caps),
    ],
    ids=["kickoff", "resume", "sensor"],
)
def test_every_task_that_stops_takes_templated_caps_and_checks_them_at_parse(make):
    task = make(max_tokens=5000, max_cost="{{ params.cost }}")
    assert {"max_tokens", "max_cost"} <= set(task.template_fields)
    assert (task.max_tokens, task.max_cost) == (5000, "{{ params.cost }}")
    with pytest.raises(
        CrewConfigurationError, match=r"^max_tokens must be a positive whole number of tokens"
    ):
        make(max_tokens=0)
    with pytest.raises(CrewConfigurationError, match=r"^max_cost must be a positive number"):
        make(max_cost="free")


def test_a_sensor_that_only_watches_cannot_have_a_cap():
    with pytest.raises(CrewConfigurationError) as caught:
        CrewStatusSensor(task_id="s", kickoff_id=KICKOFF_ID, max_tokens=100)
    assert "this task does not stop it (stop_crew=None): set stop_crew=True, or remove the cap." in str(
        caught.value
    )


def test_a_kickoff_told_not_to_stop_cannot_have_a_cap():
    with pytest.raises(CrewConfigurationError) as caught:
        CrewKickoffOperator(task_id="k", inputs={"topic": "x"}, stop_crew=False, max_cost=1.0)
    assert "(stop_crew=False): leave stop_crew at None or True, or remove the cap." in str(caught.value)


def test_the_trigger_carries_the_budget_as_json_primitives_and_rebuilds_its_wait():
    pace = SpendingPace()
    pace.next_read(100.0, 0.25)
    budget = Budget(max_tokens=5000, max_cost=2.0, prices=Prices(input=3.0, output=15.0))
    trigger = CrewStatusTrigger(
        kickoff_id=KICKOFF_ID,
        crew_conn_id="crew_default",
        wait_for="completion",
        deadline=200.0,
        not_found_deadline=100.0,
        budget=budget.to_kwargs(),
        pace=pace.to_kwargs(),
    )
    _, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs  # JSON primitives only
    poller = CrewStatusTrigger.from_kwargs(kwargs).poller(log=None)
    assert poller.budget == budget
    assert poller.pace is not None and (poller.pace.at, poller.pace.used, poller.pace.due) == (
        100.0,
        0.25,
        101.0,
    )
    free = CrewStatusTrigger(
        kickoff_id=KICKOFF_ID, crew_conn_id="c", wait_for="completion", deadline=1.0, not_found_deadline=1.0
    )
    assert "budget" not in free.serialize()[1] and free.poller(log=None).pace is None
