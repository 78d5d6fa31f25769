"""A crew task stops the execution it waits for when something other than the crew ends the wait, over
real HTTP against the local crew service (its POST /stop answers as the hosted service's does)."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_crew.exceptions import CrewExecutionTimeoutError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.operators import paid_post
from airflow_provider_crew.operators import wait_stop as task_stop
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor
from airflow_provider_crew.waiting import stopping

from .test_crew_http import SLOW_CREW, FakeStateStore, FakeTI

pytestmark = [pytest.mark.integration, pytest.mark.crew_service(SLOW_CREW)]

INPUTS = {"topic": "ops", "current_year": "2026"}


class AirflowTaskTimeout(Exception):
    """Airflow's execution_timeout, matched by name as on every minor."""


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    # Airflow's task logger does not reach caplog: read the tasks' lines from a plain logger.
    for cls in (CrewKickoffOperator, CrewStatusSensor):
        monkeypatch.setattr(cls, "log", property(lambda self: logging.getLogger("tests.stop")))


def kickoff(**kwargs) -> CrewKickoffOperator:
    return CrewKickoffOperator(
        task_id="k", inputs=INPUTS, **{"deferrable": False, "poll_interval": 0.1, **kwargs}
    )


def test_the_waits_timeout_stops_the_execution_and_drops_its_record(
    crew_service, crew_connection, monkeypatch, caplog
):
    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    ti = FakeTI()
    with caplog.at_level("INFO", logger="tests.stop"), pytest.raises(CrewExecutionTimeoutError):
        kickoff(timeout=1).execute({"ti": ti})
    [kickoff_id] = crew_service.executions
    assert crew_service.stops == [kickoff_id]
    assert crew_service.executions[kickoff_id]["state"] == "REVOKED"
    assert f"Stopping crew execution {kickoff_id} (the wait's timeout passed): stopped." in caplog.text
    assert ti.xcom["status"]["stopped"] == {"reason": stopping.WAIT_TIMEOUT, "answer": "stopped"}
    assert paid_post.KICKOFF_RECORD_KEY not in store.values  # a retry starts anew


def test_stop_crew_false_leaves_it_running(crew_service, crew_connection):
    with pytest.raises(CrewExecutionTimeoutError):
        kickoff(timeout=1, stop_crew=False).execute({"ti": FakeTI()})
    [kickoff_id] = crew_service.executions
    assert crew_service.stops == []
    assert crew_service.executions[kickoff_id]["state"] in ("PENDING", "RUNNING")


def test_a_sensor_only_watches_unless_asked(crew_service, crew_connection):
    kickoff_id = CrewHook(crew_conn_id=crew_connection).kickoff(INPUTS)
    watching = CrewStatusSensor(task_id="s", kickoff_id=kickoff_id, timeout=1, poll_interval=0.2, mode="poke")
    with pytest.raises(Exception, match=r"[Tt]imed out|timeout"):
        watching.execute({"ti": FakeTI()})
    assert crew_service.stops == []
    asked = CrewStatusSensor(
        task_id="s", kickoff_id=kickoff_id, timeout=1, poll_interval=0.2, mode="poke", stop_crew=True
    )
    with pytest.raises(Exception, match=r"[Tt]imed out|timeout"):
        asked.execute({"ti": FakeTI()})
    assert crew_service.stops == [kickoff_id]


class RunningTI(FakeTI):
    dag_id, run_id, task_id, map_index = "d", "r", "k", -1


def _waiting_kickoff(crew_service, crew_connection, **kwargs) -> tuple[CrewKickoffOperator, str, FakeTI]:
    """A kickoff as Airflow kills it: its wait runs in this process."""
    hook = CrewHook(crew_conn_id=crew_connection)
    kickoff_id = hook.kickoff(INPUTS)
    op, ti = kickoff(**kwargs), RunningTI()
    op._waiting = (kickoff_id, {"ti": ti}, hook.config)
    return op, kickoff_id, ti


def test_an_execution_timeout_stops_it(crew_service, crew_connection):
    op, kickoff_id, ti = _waiting_kickoff(crew_service, crew_connection)
    try:
        raise AirflowTaskTimeout()
    except AirflowTaskTimeout:
        op.on_kill()  # Airflow calls it inside its except block
    assert crew_service.stops == [kickoff_id]
    assert ti.xcom["status"]["stopped"]["reason"] == stopping.EXECUTION_TIMEOUT


@pytest.mark.parametrize(
    ("state", "stopped"),
    [("failed", True), ("success", True), ("restarting", True), ("running", False), ("up_for_retry", False)],
)
def test_a_killed_task_stops_it_only_when_nobody_will_read_it(
    crew_service, crew_connection, monkeypatch, caplog, state, stopped
):
    monkeypatch.setattr(task_stop, "task_instance_state", lambda *args: state)
    op, kickoff_id, _ = _waiting_kickoff(crew_service, crew_connection)
    with caplog.at_level("INFO", logger="tests.stop"):
        op.on_kill()  # SIGTERM: a user marked or cleared it, or the worker shuts down
    assert crew_service.stops == ([kickoff_id] if stopped else [])
    if not stopped:
        assert "so a retry will reattach to it" in caplog.text


def test_a_kill_whose_state_cannot_be_read_stops_nothing(crew_service, crew_connection, monkeypatch):
    def unanswered(*args):
        raise RuntimeError("the supervisor is gone")

    monkeypatch.setattr(task_stop, "task_instance_state", unanswered)
    op, _, _ = _waiting_kickoff(crew_service, crew_connection)
    op.on_kill()
    assert crew_service.stops == []


def test_a_task_that_does_not_wait_owns_nothing_to_stop(crew_service, crew_connection, monkeypatch):
    monkeypatch.setattr(task_stop, "task_instance_state", lambda *args: "failed")
    op = kickoff(wait_for_completion=False)
    op.execute({"ti": FakeTI()})
    op.on_kill()
    assert crew_service.stops == []


@pytest.mark.crew_service(SLOW_CREW, stop_endpoint="absent")
def test_a_service_without_stop_ends_the_task_as_before_with_one_line(crew_service, crew_connection, caplog):
    with caplog.at_level("INFO", logger="tests.stop"), pytest.raises(CrewExecutionTimeoutError):
        kickoff(timeout=1).execute({"ti": FakeTI()})
    lines = [
        r.getMessage()
        for r in caplog.records
        if "crew execution" in r.getMessage() and "stop" in r.getMessage().lower()
    ]
    assert len(lines) == 1 and "has no POST /stop" in lines[0], lines
    assert crew_service.stops == []


@pytest.mark.crew_service(SLOW_CREW, stop_endpoint="405")
def test_a_stop_the_service_did_not_confirm_keeps_the_record_so_a_retry_reattaches(
    crew_service, crew_connection, monkeypatch
):
    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    with pytest.raises(CrewExecutionTimeoutError):
        kickoff(timeout=1).execute({"ti": FakeTI()})
    [kickoff_id] = crew_service.executions
    assert crew_service.executions[kickoff_id]["state"] in ("PENDING", "RUNNING")  # it runs on
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["kickoff_id"] == kickoff_id

    retry = kickoff(timeout=1, wait_for_completion=False).execute({"ti": FakeTI(try_number=2)})
    assert retry == kickoff_id and crew_service.request_count("kickoff") == 1  # not a second execution
