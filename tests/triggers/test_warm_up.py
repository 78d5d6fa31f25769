"""The first CrewStatusTrigger to run in a triggerer process warms Airflow's in-process execution API
once, in the background (a task-state read), and nothing it meets there raises."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import types

import pytest

from airflow_provider_crew import _compat
from airflow_provider_crew.triggers import crew as trigger_module
from airflow_provider_crew.triggers.crew import CrewStatusTrigger

TI = types.SimpleNamespace(dag_id="d", run_id="r", task_id="kickoff", map_index=-1)


@pytest.fixture(autouse=True)
def fresh_triggerer(monkeypatch):
    """A triggerer process that has not warmed its API yet, with supervisor comms."""
    from airflow.sdk.execution_time import task_runner

    monkeypatch.setattr(_compat, "_execution_api_warmed", False)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object(), raising=False)


def trigger(kickoff_id: str) -> CrewStatusTrigger:
    now = time.time()
    made = CrewStatusTrigger(
        kickoff_id=kickoff_id,
        crew_conn_id="crew_default",
        wait_for="completion",
        deadline=now + 600,
        not_found_deadline=now + 60,
        poll_interval=60,
    )
    made.task_instance = TI
    return made


async def warm_ups_done() -> None:
    await asyncio.gather(*_compat._background)


async def test_the_first_trigger_to_run_warms_the_api_once_without_holding_its_first_poll(monkeypatch):
    asked, release = [], threading.Event()
    polls_planned = []

    def slow_state(*args):
        asked.append(args)
        release.wait(10)  # the API being built
        return "deferred"

    def first_poll_delay(*args, **kwargs):
        polls_planned.append(args)
        return 60.0

    monkeypatch.setattr(_compat, "task_instance_state", slow_state)
    monkeypatch.setattr(trigger_module, "first_poll_delay", first_poll_delay)
    for n in range(3):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(trigger(f"k-{n}").run()), 0.3)

    assert len(polls_planned) == 3  # each went on to its first poll while the warm-up waited
    release.set()
    await warm_ups_done()
    assert asked == [("d", "r", "kickoff", -1)]
    _compat.warm_execution_api(TI)
    await warm_ups_done()
    assert len(asked) == 1


async def test_a_failed_warm_up_raises_nothing_and_says_so_at_debug(monkeypatch, caplog):
    def unanswered(*args):
        raise AttributeError("RuntimeTaskInstance has no get_task_states")  # an Airflow without it

    monkeypatch.setattr(_compat, "task_instance_state", unanswered)
    with caplog.at_level(logging.DEBUG, logger=_compat.__name__):
        _compat.warm_execution_api(TI)
        await warm_ups_done()

    assert "Warming the execution API failed: AttributeError" in caplog.text
    assert [r.levelno for r in caplog.records if r.name == _compat.__name__] == [logging.DEBUG]


async def test_nothing_is_asked_outside_a_task_sdk_process_or_without_a_task_instance(monkeypatch):
    from airflow.sdk.execution_time import task_runner

    asked = []
    monkeypatch.setattr(_compat, "task_instance_state", lambda *args: asked.append(args))
    _compat.warm_execution_api(None)
    monkeypatch.delattr(task_runner, "SUPERVISOR_COMMS")
    _compat.warm_execution_api(TI)
    await warm_ups_done()

    assert asked == []
