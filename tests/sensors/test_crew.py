"""CrewStatusSensor against the local crew service over real HTTP (poke and deferred paths)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from airflow.providers.common.compat.sdk import AirflowSensorTimeout, PokeReturnValue, TaskDeferred

from airflow_provider_crew.exceptions import (
    CrewConfigurationError,
    CrewExecutionFailedError,
    CrewExecutionNotFoundError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.sensors.crew import CrewStatusSensor
from airflow_provider_crew.triggers.crew import CrewStatusTrigger

FAILING_CREW = {
    "name": "failing",
    "inputs": ["topic"],
    "step_seconds": 0.01,
    "tasks": [{"name": "only_task", "agent": "A", "description": "d {topic}", "expected_output": "e", "fails": True,
               "error": "only_task failed: tool crashed"}],
}


class FakeTI:
    def __init__(self, started_seconds_ago: float = 0.0) -> None:
        self.start_date = datetime.now(timezone.utc) - timedelta(seconds=started_seconds_ago)
        self.xcom: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value


def poke_until_done(sensor: CrewStatusSensor, ti: FakeTI, crew_service, kickoff_id: str, *states: str):
    crew_service.wait_for_state(kickoff_id, *states)
    return sensor.poke({"ti": ti})


@pytest.fixture
def hook(crew_connection) -> CrewHook:
    return CrewHook()


def test_poke_is_false_while_running_then_returns_the_output(crew_service, hook):
    kickoff_id = hook.kickoff({"topic": "sensors", "current_year": "2026"})
    sensor, ti = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=False), FakeTI()
    assert sensor.poke({"ti": ti}) is False
    done = poke_until_done(sensor, ti, crew_service, kickoff_id)
    assert isinstance(done, PokeReturnValue) and done.is_done
    assert done.xcom_value == crew_service.executions[kickoff_id]["result"] == ti.xcom["output"]
    assert "sensors" in done.xcom_value


def test_wait_for_human_input_returns_the_paused_task(crew_service, crew_webhooks, crew_connection, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(crew="review"))
    kickoff_id = CrewHook().kickoff(
        {"topic": "sensors", "audience": "ops"},
        human_input_webhook={"url": crew_webhooks.url_for("human"),
                             "authentication": {"strategy": "bearer", "token": "t0k3n-for-hooks"}},
    )
    sensor = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, wait_for="human_input", deferrable=False)
    done = poke_until_done(sensor, FakeTI(), crew_service, kickoff_id, "PAUSED")
    assert done.xcom_value["execution_id"] == kickoff_id
    assert done.xcom_value["task_id"] == crew_service.executions[kickoff_id]["task_ids"]["draft_task"]
    assert "draft" in done.xcom_value["task_output"].lower()


@pytest.mark.crew_service(FAILING_CREW)
def test_a_failed_execution_fails_the_sensor_with_the_service_error(crew_service, hook):
    kickoff_id = hook.kickoff({"topic": "x"})
    sensor = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=False)
    with pytest.raises(CrewExecutionFailedError, match="ended FAILED: only_task failed: tool crashed"):
        poke_until_done(sensor, FakeTI(), crew_service, kickoff_id, "FAILED")


def test_a_404_is_tolerated_within_the_grace_window_then_fails(crew_connection):
    sensor = CrewStatusSensor(task_id="wait", kickoff_id="00000000-0000-4000-8000-000000000000",
                              not_found_grace=30, deferrable=False)
    assert sensor.poke({"ti": FakeTI(started_seconds_ago=5)}) is False
    with pytest.raises(CrewExecutionNotFoundError, match="not found"):
        sensor.poke({"ti": FakeTI(started_seconds_ago=31)})


def test_deferrable_execute_defers_to_the_trigger_with_an_absolute_deadline(crew_connection):
    sensor = CrewStatusSensor(task_id="wait", kickoff_id="k-1", deferrable=True, timeout=120, poke_interval=3)
    before = datetime.now(timezone.utc).timestamp()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": FakeTI()})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CrewStatusTrigger)
    kwargs = trigger.serialize()[1]
    assert kwargs["kickoff_id"] == "k-1" and kwargs["poll_interval"] == 3.0
    assert before + 119 <= kwargs["deadline"] <= before + 125
    assert deferred.value.method_name == "execute_complete"


def test_a_trigger_timeout_raises_sensor_timeout_so_soft_fail_applies():
    sensor = CrewStatusSensor(task_id="wait", kickoff_id="k-1", deferrable=True, soft_fail=True)
    event = {"status": "timeout", "kickoff_id": "k-1", "message": "Timed out waiting", "record": None}
    with pytest.raises(AirflowSensorTimeout, match="Timed out waiting"):
        sensor.execute_complete({"ti": FakeTI()}, event)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"wait_for": "done"}, "wait_for='done' is not known"),
    ({"poke_interval": 0}, "poke_interval must be greater than 0"),
    ({"not_found_grace": -1}, "not_found_grace must be greater than 0"),
])
def test_bad_input_fails_at_parse(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        CrewStatusSensor(task_id="wait", kickoff_id="k", **kwargs)


def test_an_empty_kickoff_id_is_named_at_task_start():
    sensor = CrewStatusSensor(task_id="wait", kickoff_id="", deferrable=False)
    with pytest.raises(CrewConfigurationError, match="kickoff_id rendered to ''"):
        sensor.execute({"ti": FakeTI()})


def test_deferrable_sensor_does_not_defer_when_the_execution_already_finished(crew_service, hook):
    kickoff_id = hook.kickoff({"topic": "done already", "current_year": "2026"})
    crew_service.wait_for_state(kickoff_id)
    sensor, ti = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=True), FakeTI()

    output = sensor.execute({"ti": ti})  # no TaskDeferred: nothing left to wait for

    assert output == crew_service.executions[kickoff_id]["result"] == ti.xcom["output"]
