"""A deferred task ended by a user stops its execution when Airflow cancels its trigger; a triggerer
restart, a move to another triggerer, a fired event or a time-out do not (real HTTP, local service)."""

from __future__ import annotations

import asyncio
import time
import types
import uuid

import pytest

from airflow_provider_crew.triggers import crew as trigger_module
from airflow_provider_crew.triggers.crew import CrewStatusTrigger
from tests.conftest import close_shared_sessions

from .test_crew import connect  # noqa: F401 - the fixture

SLOW = {
    "name": "slow",
    "inputs": ["topic"],
    "pending_seconds": 0.01,
    "step_seconds": 10,
    "tasks": [{"name": "long_task", "agent": "Worker", "steps": 1}],
}
pytestmark = [pytest.mark.integration, pytest.mark.crew_service(SLOW)]


def trigger_for(
    kickoff_id: str, *, stop_crew: bool = True, deadline_in: float = 60, woken: bool = False
) -> CrewStatusTrigger:
    now = time.time()
    trigger = CrewStatusTrigger(
        kickoff_id=kickoff_id,
        crew_conn_id="crew_default",
        wait_for="completion",
        deadline=now + deadline_in,
        not_found_deadline=now + 10,
        poll_interval=0.05,
        max_poll_interval=0.2,
        stop_crew=stop_crew,
        safety_poll_interval=300 if woken else 0,  # the crew's webhooks wake the wait
    )
    trigger.task_instance = types.SimpleNamespace(dag_id="d", run_id="r", task_id="kickoff", map_index=-1)
    return trigger


@pytest.fixture
def running(crew_service, connect):  # noqa: F811
    from airflow_provider_crew.hooks.crew import CrewHook

    connect()
    return CrewHook().kickoff({"topic": "stop"})


@pytest.mark.parametrize(
    ("state", "stopped"),
    [("failed", True), ("success", True), (None, True), ("scheduled", True), ("deferred", False)],
)
async def test_a_cancelled_trigger_stops_the_execution_only_when_its_task_no_longer_waits(
    crew_service, running, monkeypatch, state, stopped
):
    monkeypatch.setattr(trigger_module, "task_instance_state", lambda *args: state)
    await trigger_for(running).stop_if_abandoned()
    await close_shared_sessions()
    assert crew_service.stops == ([running] if stopped else [])


async def test_nothing_is_stopped_when_asked_not_to_after_its_event_past_its_deadline_or_unknown(
    crew_service, running, monkeypatch
):
    monkeypatch.setattr(trigger_module, "task_instance_state", lambda *args: "failed")
    await trigger_for(running, stop_crew=False).stop_if_abandoned()
    await trigger_for(running, woken=True).stop_if_abandoned()  # a wake looks like a user's mark
    fired = trigger_for(running)
    fired._fired = True
    await fired.stop_if_abandoned()
    await trigger_for(running, deadline_in=-1).stop_if_abandoned()  # Airflow's own time-out

    def unanswered(*args):
        raise RuntimeError("the triggerer is shutting down")

    monkeypatch.setattr(trigger_module, "task_instance_state", unanswered)
    await trigger_for(running).stop_if_abandoned()
    await close_shared_sessions()
    assert crew_service.stops == []


@pytest.mark.parametrize("airflow_3_3", [False, True])
async def test_a_cancel_stops_in_run_before_3_3_and_in_on_kill_from_3_3(
    crew_service, running, monkeypatch, airflow_3_3
):
    monkeypatch.setattr(trigger_module, "task_instance_state", lambda *args: "failed")
    monkeypatch.setattr(trigger_module, "TRIGGER_ON_KILL", airflow_3_3)
    trigger = trigger_for(running)

    async def drain() -> None:
        async for _ in trigger.run():
            pass

    task = asyncio.ensure_future(drain())
    await asyncio.sleep(0.5)  # polling: the crew runs 10 s
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert crew_service.stops == ([] if airflow_3_3 else [running])
    if airflow_3_3:  # Airflow 3.3's triggerer calls on_kill for a user's action
        await trigger.on_kill()
        assert crew_service.stops == [running]
    await close_shared_sessions()


def test_stop_crew_is_a_json_primitive_kwarg():
    trigger = trigger_for(str(uuid.uuid4()))
    _, kwargs = trigger.serialize()
    assert kwargs["stop_crew"] is True
    assert CrewStatusTrigger.from_kwargs(kwargs).stop_crew is True


@pytest.mark.crew_service("research")
async def test_a_wake_is_no_users_action_the_execution_reached_what_the_wait_waits_for(
    crew_service,
    connect,  # noqa: F811
    monkeypatch,
):
    # A webhook wake ends the deferral from outside and leaves the task instance running or already
    # success, as a user's action does; it comes when the crew reached the wait's end, so nothing stops.
    from airflow_provider_crew.hooks.crew import CrewHook

    connect()
    kickoff_id = CrewHook().kickoff({"topic": "woken", "current_year": "2026"})
    crew_service.wait_for_state(kickoff_id)
    monkeypatch.setattr(trigger_module, "task_instance_state", lambda *args: "success")
    await trigger_for(kickoff_id).stop_if_abandoned()
    await close_shared_sessions()
    assert crew_service.stops == []
