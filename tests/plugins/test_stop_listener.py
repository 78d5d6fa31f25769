"""The api-server's listener stops a deferred crew wait's execution that a user ends: at once when no
triggerer holds its trigger, later as a backstop when one does, after the state is committed, and only
while the task instance keeps it (real HTTP, local service; Airflow's task instance and trigger rows are
stood in for: tests/e2e/test_stop_listener_e2e.py runs the real ones)."""

from __future__ import annotations

import time
import types

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from airflow_provider_crew.plugins import stop_listener
from airflow_provider_crew.plugins.stop_listener import StopListener
from airflow_provider_crew.triggers.crew import CrewStatusTrigger
from airflow_provider_crew.waiting.rules import WaitFor
from tests.triggers.test_crew import connect  # noqa: F401 - the fixture
from tests.triggers.test_stop import SLOW, trigger_for

pytestmark = [pytest.mark.integration, pytest.mark.crew_service(SLOW)]
CLASSPATH = "airflow_provider_crew.triggers.crew.CrewStatusTrigger"


def trigger_row(trigger: CrewStatusTrigger, *, held_by: int | None = None, classpath: str = CLASSPATH):
    _, kwargs = trigger.serialize()
    return types.SimpleNamespace(classpath=classpath, triggerer_id=held_by, kwargs=kwargs)


class Handed(list):
    """The waits handed to the stopper, and each stood-in task instance's session."""

    def __init__(self) -> None:
        super().__init__()
        self.sessions: dict[int, Session] = {}


@pytest.fixture
def submitted(monkeypatch):
    """The waits the listener hands to its stopper, in order; the task instance is as the user left it
    unless a test says otherwise."""
    import sqlalchemy.orm

    waits = Handed()
    monkeypatch.setattr(sqlalchemy.orm, "object_session", lambda ti: waits.sessions.get(id(ti)))
    monkeypatch.setattr(stop_listener.STOPPER, "submit", waits.append)
    monkeypatch.setattr(stop_listener, "still_as_set", lambda wait: True)
    return waits


@pytest.fixture
def running(crew_service, connect):  # noqa: F811
    from airflow_provider_crew.hooks.crew import CrewHook

    connect()
    return CrewHook().kickoff({"topic": "stop"})


def end_as_user(submitted, state: str, row, *, commit: bool = True, previous_state=None) -> None:
    """A user sets the task instance's state (the listener runs in the request, before its commit)."""
    session = Session(create_engine("sqlite://"))
    session.get = lambda model, trigger_id: row if trigger_id == 7 else None  # type: ignore[method-assign]
    ti = types.SimpleNamespace(
        state=state, trigger_id=7, dag_id="d", run_id="r", task_id="kickoff", map_index=-1, try_number=1
    )
    submitted.sessions[id(ti)] = session
    listener = StopListener()
    if state == "failed":
        listener.on_task_instance_failed(previous_state=previous_state, task_instance=ti, error="set")
    else:
        listener.on_task_instance_success(previous_state=previous_state, task_instance=ti)
    if commit:
        session.commit()
    else:
        session.rollback()


@pytest.mark.parametrize("state", ["failed", "success"])
@pytest.mark.parametrize("held_by", [None, 3])
def test_a_users_committed_end_stops_at_once_unless_a_triggerer_holds_the_trigger(
    crew_service, running, submitted, state, held_by
):
    end_as_user(submitted, state, trigger_row(trigger_for(running), held_by=held_by))
    [wait] = submitted
    assert (wait.kickoff_id, wait.reason) == (running, f"the task was marked {state}")
    assert wait.held is (held_by is not None)  # held: a backstop, later
    stop_listener.stop_abandoned(wait)
    assert crew_service.stops == [running]


def test_with_the_webhook_wake_on_a_users_end_stops_at_once_even_when_a_triggerer_holds_the_trigger(
    crew_service, running, submitted
):
    """A wake calls no listener, so the mark is a user's; the trigger, which cannot tell, stops nothing."""
    end_as_user(submitted, "failed", trigger_row(trigger_for(running, woken=True), held_by=3))
    [wait] = submitted
    assert not wait.held
    stop_listener.stop_abandoned(wait)
    assert crew_service.stops == [running]


def test_nothing_is_handed_on_that_is_not_a_users_committed_end_of_a_crew_wait_to_stop(
    crew_service, running, submitted
):
    wait = trigger_for(running)
    end_as_user(submitted, "failed", trigger_row(wait), commit=False)  # the request failed
    end_as_user(submitted, "failed", trigger_row(wait), previous_state="running")  # Airflow's own end
    end_as_user(submitted, "failed", trigger_row(wait, classpath="other.Trigger"))
    end_as_user(submitted, "failed", trigger_row(trigger_for(running, stop_crew=False)))
    end_as_user(submitted, "failed", trigger_row(trigger_for(running, deadline_in=-1)))
    end_as_user(submitted, "failed", None)  # the trigger row is gone
    assert submitted == []


def test_the_stop_is_skipped_when_the_task_instance_changed_or_the_crew_ended(
    crew_service, running, submitted, monkeypatch, caplog
):
    end_as_user(submitted, "failed", trigger_row(trigger_for(running), held_by=3))
    [wait] = submitted
    monkeypatch.setattr(stop_listener, "still_as_set", lambda wait: False)  # cleared meanwhile
    stop_listener.stop_abandoned(wait)
    assert crew_service.stops == []
    assert (
        f"Not stopping crew execution {running} (the task was marked failed): its task instance changed"
        in (caplog.text)
    )
    monkeypatch.setattr(stop_listener, "still_as_set", lambda wait: True)
    stop_listener.stop_abandoned(wait)  # its triggerer had not started the trigger: the backstop stops it
    stop_listener.stop_abandoned(wait)  # ... once: a stopped crew is finished
    assert crew_service.stops == [running]


@pytest.mark.crew_service("research")
def test_a_crew_that_reached_its_end_is_not_stopped(crew_service, connect, submitted):  # noqa: F811
    from airflow_provider_crew.hooks.crew import CrewHook

    connect()
    kickoff_id = CrewHook().kickoff({"topic": "done", "current_year": "2026"})
    crew_service.wait_for_state(kickoff_id)
    end_as_user(submitted, "success", trigger_row(trigger_for(kickoff_id)))
    stop_listener.stop_abandoned(submitted[0])
    assert crew_service.stops == []


def test_the_listener_never_raises_into_airflow(submitted, caplog):
    def broken(model, trigger_id):
        raise RuntimeError("database is locked")

    session = Session(create_engine("sqlite://"))
    session.get = broken  # type: ignore[method-assign]
    ti = types.SimpleNamespace(state="failed", trigger_id=7)
    submitted.sessions[id(ti)] = session
    started = time.monotonic()
    StopListener().on_task_instance_failed(previous_state=None, task_instance=ti, error="set")
    assert time.monotonic() - started < 1
    assert "Could not check" in caplog.text and "database is locked" in caplog.text
    assert submitted == []


def test_the_stopper_stops_at_once_or_after_the_backstop(monkeypatch):
    stopped: list[tuple[str, float]] = []
    monkeypatch.setattr(stop_listener, "BACKSTOP_SECONDS", 0.3)
    monkeypatch.setattr(
        stop_listener, "stop_abandoned", lambda wait: stopped.append((wait.kickoff_id, time.monotonic()))
    )
    stopper = stop_listener.Stopper()
    fields = {
        "crew_conn_id": "c",
        "wait_for": WaitFor.COMPLETION,
        "reason": "r",
        "dag_id": "d",
        "run_id": "r",
    }
    started = time.monotonic()
    stopper.submit(
        stop_listener.AbandonedWait("held", held=True, task_id="t", map_index=-1, try_number=1, **fields)
    )
    stopper.submit(
        stop_listener.AbandonedWait("unheld", held=False, task_id="t", map_index=-1, try_number=1, **fields)
    )
    deadline = time.monotonic() + 10
    while len(stopped) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [kickoff_id for kickoff_id, _ in stopped] == ["unheld", "held"]
    assert stopped[0][1] - started < 0.3 <= stopped[1][1] - started


def test_the_trigger_is_read_without_flushing_the_users_request(crew_service, running):
    """The listener runs inside the user's request: its read must not flush the new state early (a
    flush would take the task instance's row lock for the rest of the request)."""
    session = Session(create_engine("sqlite://"))
    row = trigger_row(trigger_for(running))
    autoflush_at_read = []

    def get(model, trigger_id):
        autoflush_at_read.append(session.autoflush)
        return row

    session.get = get  # type: ignore[method-assign]
    ti = types.SimpleNamespace(
        state="failed", trigger_id=7, dag_id="d", run_id="r", task_id="kickoff", map_index=-1, try_number=1
    )
    wait = stop_listener.abandoned_wait(ti, session)
    assert autoflush_at_read == [False] and session.autoflush  # off for the read only
    assert wait is not None and wait.kickoff_id == running
