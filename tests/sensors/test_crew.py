"""CrewStatusSensor against the local crew service over real HTTP (poke and deferred paths).

The poke, blocking and deferred waits follow one rule set (``waiting.decide``); several tests here
run the same situation through ``poke`` and through the deferred path and expect the same end.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from airflow.providers.common.compat.sdk import AirflowSensorTimeout, PokeReturnValue, TaskDeferred

from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewConfigurationError,
    CrewError,
    CrewExecutionFailedError,
    CrewExecutionNotFoundError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.sensors.crew import CrewStatusSensor
from airflow_provider_crew.triggers.crew import CrewStatusTrigger
from airflow_provider_crew.waiting.event import CrewWaitEvent
from tests.conftest import close_shared_sessions

FAILING_CREW = {
    "name": "failing",
    "inputs": ["topic"],
    "step_seconds": 0.01,
    "tasks": [
        {
            "name": "only_task",
            "agent": "A",
            "description": "d {topic}",
            "expected_output": "e",
            "fails": True,
            "error": "only_task failed: tool crashed",
        }
    ],
}


UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


class FakeTI:
    def __init__(
        self,
        started_seconds_ago: float = 0.0,
        pulls: dict | None = None,
        first_poke_seconds_ago: float | None = None,
    ) -> None:
        self.start_date = datetime.now(timezone.utc) - timedelta(seconds=started_seconds_ago)
        self.try_number = 1
        self.xcom: dict[str, object] = {}
        self.pulls = pulls or {}
        self.first_poke_seconds_ago = first_poke_seconds_ago

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key="return_value", **_):
        return self.pulls.get((task_ids, key))

    def get_first_reschedule_date(self, context):
        if self.first_poke_seconds_ago is None:
            return None
        return datetime.now(timezone.utc) - timedelta(seconds=self.first_poke_seconds_ago)


def kicked_off(kickoff_id: str, seconds_ago: float) -> dict:
    """The XCom ``kicked_off_at`` record a kickoff task pushes."""
    return {"kickoff_id": kickoff_id, "epoch_seconds": time.time() - seconds_ago}


async def run_trigger(kwargs: dict, timeout: float = 15.0) -> CrewWaitEvent:
    """Run the trigger a deferral handed over, as the triggerer would, and parse its one event."""
    # not_before guards against an Airflow scheduler race that does not exist in this test.
    trigger = CrewStatusTrigger(**(kwargs | {"not_before": 0.0}))

    async def drain() -> list:
        return [event async for event in trigger.run()]

    try:
        events = await asyncio.wait_for(drain(), timeout)
    finally:
        await close_shared_sessions()
    assert len(events) == 1, events
    return CrewWaitEvent.parse(events[0].payload)


def poke_until_done(sensor: CrewStatusSensor, ti: FakeTI, crew_service, kickoff_id: str, *states: str):
    crew_service.wait_for_state(kickoff_id, *states)
    return sensor.poke({"ti": ti})


@pytest.fixture
def hook(crew_connection) -> CrewHook:
    return CrewHook()


def test_poke_is_false_while_running_then_returns_the_kickoff_id_with_the_result(crew_service, hook):
    kickoff_id = hook.kickoff({"topic": "sensors", "current_year": "2026"})
    sensor, ti = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=False), FakeTI()
    assert sensor.poke({"ti": ti}) is False
    done = poke_until_done(sensor, ti, crew_service, kickoff_id)
    assert isinstance(done, PokeReturnValue) and done.is_done
    assert done.xcom_value == kickoff_id
    assert ti.xcom["result"] == crew_service.executions[kickoff_id]["result"]
    assert "sensors" in ti.xcom["result"]


def kickoff_a_pausing_crew(crew_service, crew_webhooks, monkeypatch) -> str:
    """An execution of the review crew, which pauses for human input (its kickoff names a webhook)."""
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(crew="review"))
    return CrewHook().kickoff(
        {"topic": "sensors", "audience": "ops"},
        human_input_webhook={
            "url": crew_webhooks.url_for("human"),
            "authentication": {"strategy": "bearer", "token": "t0k3n-for-hooks"},
        },
    )


def test_a_pause_ends_the_wait_and_pushes_the_paused_task_by_default(
    crew_service, crew_webhooks, crew_connection, monkeypatch
):
    kickoff_id = kickoff_a_pausing_crew(crew_service, crew_webhooks, monkeypatch)
    sensor, ti = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=False), FakeTI()
    done = poke_until_done(sensor, ti, crew_service, kickoff_id, "PAUSED")
    assert done.xcom_value == kickoff_id
    paused = ti.xcom["human_input"]
    assert paused["execution_id"] == kickoff_id
    assert paused["task_id"] == crew_service.executions[kickoff_id]["task_ids"]["draft_task"]
    assert "draft" in paused["task_output"].lower()
    assert "result" not in ti.xcom


def test_a_pause_under_on_human_input_fail_fails_without_retry(
    crew_service, crew_webhooks, crew_connection, monkeypatch
):
    from airflow_provider_crew._compat import AirflowFailException

    kickoff_id = kickoff_a_pausing_crew(crew_service, crew_webhooks, monkeypatch)
    sensor = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, on_human_input="fail", deferrable=False)
    crew_service.wait_for_state(kickoff_id, "PAUSED")
    with pytest.raises(AirflowFailException, match=f"{kickoff_id} paused for human input.*without retry"):
        sensor.poke({"ti": FakeTI()})


@pytest.mark.crew_service(FAILING_CREW)
def test_a_failed_execution_fails_the_sensor_with_the_service_error(crew_service, hook):
    kickoff_id = hook.kickoff({"topic": "x"})
    sensor = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=False)
    with pytest.raises(CrewExecutionFailedError, match="ended FAILED: only_task failed: tool crashed"):
        poke_until_done(sensor, FakeTI(), crew_service, kickoff_id, "FAILED")


def test_a_404_is_tolerated_within_the_grace_window_then_fails(crew_connection):
    # No kickoff time known (a literal id): the grace counts from the start of the sensor's task.
    def sensor():
        return CrewStatusSensor(task_id="wait", kickoff_id=UNKNOWN_ID, not_found_grace=30, deferrable=False)

    assert sensor().poke({"ti": FakeTI(started_seconds_ago=5)}) is False
    with pytest.raises(CrewExecutionNotFoundError, match="not found"):
        sensor().poke({"ti": FakeTI(started_seconds_ago=31)})


@pytest.mark.parametrize("deferrable", [False, True])
def test_the_404_grace_counts_from_the_kickoff_not_from_the_sensor_start(crew_connection, deferrable):
    # The sensor started just now, but the kickoff task says it started the execution 31 s ago.
    sensor = CrewStatusSensor(
        task_id="wait",
        kickoff_id=UNKNOWN_ID,
        kickoff_task_id="kickoff",
        not_found_grace=30,
        deferrable=deferrable,
    )
    other = kicked_off("11111111-0000-4000-8000-000000000000", 0)  # a mapped kickoff pushes one per id
    ti = FakeTI(pulls={("kickoff", "kicked_off_at"): [other, kicked_off(UNKNOWN_ID, 31)]})
    with pytest.raises(CrewExecutionNotFoundError, match=f"Crew execution {UNKNOWN_ID} not found"):
        sensor.execute({"ti": ti}) if deferrable else sensor.poke({"ti": ti})


def test_a_deferred_sensor_hands_the_kickoff_based_grace_to_the_trigger(crew_connection):
    record = kicked_off(UNKNOWN_ID, 5)
    sensor = CrewStatusSensor(
        task_id="wait", kickoff_id=UNKNOWN_ID, kickoff_task_id="kickoff", not_found_grace=30, deferrable=True
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": FakeTI(pulls={("kickoff", "kicked_off_at"): record})})
    kwargs = deferred.value.trigger.serialize()[1]
    assert kwargs["not_found_deadline"] == pytest.approx(record["epoch_seconds"] + 30)


def test_the_deferrals_timeout_outlasts_the_race_hold_of_a_long_task_success_overtime(
    crew_connection, monkeypatch
):
    """A held event must reach its task: Airflow's own deferral timeout, fired before the hold ends,
    would end the task as a bare time-out, without the typed result or the stop."""
    from airflow_provider_crew.operators import wait as task_module

    monkeypatch.setattr(task_module, "deferral_settle_seconds", lambda: 140.0)  # task_success_overtime 120
    sensor = CrewStatusSensor(task_id="wait", kickoff_id=UNKNOWN_ID, timeout=30, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": FakeTI()})
    kwargs = deferred.value.trigger.serialize()[1]
    assert deferred.value.timeout.total_seconds() >= kwargs["not_before"] - time.time() + 59
    assert kwargs["deadline"] < kwargs["not_before"]


def test_in_reschedule_mode_the_grace_counts_from_the_first_poke_not_from_each_reschedule(crew_connection):
    # No kickoff time known. Each reschedule restarts the task with a new start date; the grace must not.
    sensor = CrewStatusSensor(
        task_id="wait", kickoff_id=UNKNOWN_ID, not_found_grace=30, mode="reschedule", deferrable=False
    )
    with pytest.raises(CrewExecutionNotFoundError, match="not found"):
        sensor.poke({"ti": FakeTI(started_seconds_ago=0, first_poke_seconds_ago=31)})


def test_a_sensor_on_kickoff_output_finds_the_kickoff_task():
    from airflow.sdk import DAG

    from airflow_provider_crew.operators.crew import CrewKickoffOperator

    with DAG("d", schedule=None):
        start = CrewKickoffOperator(task_id="kickoff", inputs={"topic": "x"})
        sensor = CrewStatusSensor(task_id="wait", kickoff_id=start.output)
    assert sensor.kickoff_task_id == "kickoff"


def test_poke_fails_at_once_when_the_service_forgets_an_execution_it_answered_before(crew_service, hook):
    kickoff_id = hook.kickoff({"topic": "lost", "current_year": "2026"})
    sensor, ti = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=False), FakeTI()
    assert sensor.poke({"ti": ti}) is False  # seen: the service answered for it
    crew_service.reset()  # the service restarts without its store
    with pytest.raises(CrewExecutionNotFoundError) as caught:
        sensor.poke({"ti": ti})  # well within the 60 s grace: before, this was "still queued"
    assert str(caught.value).startswith(
        f"The crew service no longer knows execution {kickoff_id}: it answered"
    )


async def test_a_deferred_wait_fails_at_once_when_the_service_forgets_an_execution_seen_before_deferring(
    crew_service, hook
):
    kickoff_id = hook.kickoff({"topic": "lost", "current_year": "2026"})
    sensor = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=True, poke_interval=0.05)
    with pytest.raises(TaskDeferred) as deferred:
        await asyncio.to_thread(sensor.execute, {"ti": FakeTI()})  # reads the status once: seen
    kwargs = deferred.value.trigger.serialize()[1]
    assert kwargs["not_found_deadline"] <= time.time()  # the grace ended with that read
    crew_service.reset()

    event = await run_trigger(kwargs)  # before, it polled 404s until the 60 s grace ran out

    assert event.outcome.value == "not_found"
    assert crew_service.request_count("status") == 1  # the first 404 ended the wait: no grace
    with pytest.raises(CrewExecutionNotFoundError, match=kickoff_id):
        sensor.execute_complete({"ti": FakeTI()}, event.model_dump(mode="json"))


def test_a_rejected_token_ends_poke_and_deferred_waits_with_the_same_error(crew_service, monkeypatch):
    conn = crew_service.connection_dict() | {"password": "not-the-token-7f3e"}
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", json.dumps(conn))
    errors = []
    for deferrable in (False, True):
        sensor = CrewStatusSensor(task_id="wait", kickoff_id=UNKNOWN_ID, deferrable=deferrable)
        with pytest.raises(CrewError) as caught:
            sensor.execute({"ti": FakeTI()})
        errors.append(caught.value)
    # Before, poke raised the hook's CrewAuthenticationError as-is while the deferred wait ended "error".
    assert not any(isinstance(error, CrewAuthenticationError) for error in errors)
    assert [type(error) for error in errors] == [CrewError, CrewError]
    assert str(errors[0]) == str(errors[1])
    assert str(errors[0]).startswith(f"Waiting for crew execution {UNKNOWN_ID} failed: ")
    assert "401" in str(errors[0]) and "not-the-token-7f3e" not in str(errors[0])


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
    event = {"outcome": "timeout", "kickoff_id": "k-1", "message": "Timed out waiting", "record": None}
    with pytest.raises(AirflowSensorTimeout, match="Timed out waiting"):
        sensor.execute_complete({"ti": FakeTI()}, event)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_human_input": "done"}, "on_human_input='done' is not known"),
        ({"poke_interval": 0}, "poke_interval must be greater than 0"),
        ({"poll_interval": 0}, "poll_interval must be greater than 0"),
        ({"poll_interval": 5, "poke_interval": 60}, "name the same setting of CrewStatusSensor"),
        ({"timeout": 0}, "timeout must be greater than 0"),
        ({"not_found_grace": -1}, "not_found_grace must be greater than 0"),
    ],
)
def test_bad_input_fails_at_parse(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        CrewStatusSensor(task_id="wait", kickoff_id="k", **kwargs)


def test_an_empty_kickoff_id_is_named_at_parse_and_one_that_renders_empty_at_task_start():
    with pytest.raises(CrewConfigurationError, match="kickoff_id is required: the execution to watch"):
        CrewStatusSensor(task_id="wait", kickoff_id=" ")
    sensor = CrewStatusSensor(task_id="wait", kickoff_id="{{ params.missing }}", deferrable=False)
    sensor.kickoff_id = ""  # what the template rendered to
    with pytest.raises(CrewConfigurationError, match="kickoff_id rendered to ''"):
        sensor.execute({"ti": FakeTI()})


def test_deferrable_sensor_does_not_defer_when_the_execution_already_finished(crew_service, hook):
    kickoff_id = hook.kickoff({"topic": "done already", "current_year": "2026"})
    crew_service.wait_for_state(kickoff_id)
    sensor, ti = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id, deferrable=True), FakeTI()

    returned = sensor.execute({"ti": ti})  # no TaskDeferred: nothing left to wait for

    assert returned == kickoff_id
    assert ti.xcom["result"] == crew_service.executions[kickoff_id]["result"]


def test_the_timing_parameters_mean_what_they_mean_on_every_crew_task():
    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.operators.resume import CrewResumeOperator

    sensor = CrewStatusSensor(task_id="wait", kickoff_id="k")
    kickoff = CrewKickoffOperator(task_id="kickoff", inputs={})
    resume = CrewResumeOperator(task_id="resume", kickoff_id="k", crew_task_id="t", is_approve=True)
    for task in (sensor, kickoff, resume):
        assert (task.poll_interval, task.max_poll_interval, task.timeout) == (2.0, 15.0, 24 * 3600.0)
    assert sensor.poke_interval == 2.0  # Airflow's name for the same setting
    assert CrewStatusSensor(task_id="a", kickoff_id="k", poke_interval=7).poll_interval == 7.0
    assert (
        CrewStatusSensor(task_id="b", kickoff_id="k", poll_interval=7, poke_interval=7).poke_interval == 7.0
    )
