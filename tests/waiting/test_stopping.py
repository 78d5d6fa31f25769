"""When a crew task stops the execution it waits for, and the one log line that says so."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_crew.models import StopOutcome, StopResult
from airflow_provider_crew.waiting import stopping

URL = "https://crew.example.test"


@pytest.mark.parametrize(
    ("state", "deferred", "reason"),
    [
        ("failed", False, "the task was marked failed"),
        ("success", True, "the task was marked success"),
        (None, True, stopping.CLEARED),  # a clear leaves no state
        ("restarting", False, stopping.CLEARED),  # a running task cleared
        ("scheduled", True, stopping.CLEARED),
        ("running", True, stopping.CLEARED),  # a cleared deferred task's new try already runs
        ("running", False, None),  # a worker going away, a lost heartbeat: the retry reattaches
        ("deferred", True, None),  # a triggerer restart or a move to another triggerer
        ("up_for_retry", False, None),  # Airflow failed the try: the retry reattaches
    ],
)
def test_the_task_instances_state_says_whether_anyone_still_waits(state, deferred, reason):
    assert stopping.reason_for_state(state, deferred=deferred) == reason


def test_a_service_without_stop_is_said_once_then_left_alone():
    unsupported = StopResult(outcome=StopOutcome.NOT_SUPPORTED, detail="HTTP 404")
    assert stopping.before_stop(URL, "k1", stopping.CLEARED, enabled=True) is None
    level, line = stopping.after_stop(URL, "k1", stopping.CLEARED, unsupported)
    assert level == logging.WARNING
    assert "Stopping crew execution k1 (the task was cleared): not supported by this service" in line
    assert "not asked again from this process" in line
    later = stopping.before_stop(URL, "k2", stopping.WAIT_TIMEOUT, enabled=True)
    assert later is not None and "k2" in later and "has no POST /stop (learned earlier" in later
    assert stopping.before_stop("https://other.example.test", "k3", stopping.CLEARED, enabled=True) is None


def test_the_connection_can_turn_stopping_off_and_each_answer_is_one_line():
    off = stopping.before_stop(URL, "k1", stopping.WAIT_TIMEOUT, enabled=False)
    assert off == (
        "Not stopping crew execution k1 (the wait's timeout passed): the connection's stop_executions is off."
    )
    stopped = stopping.after_stop(URL, "k1", stopping.WAIT_TIMEOUT, StopResult(outcome=StopOutcome.STOPPED))
    assert stopped == (logging.INFO, "Stopping crew execution k1 (the wait's timeout passed): stopped.")
    finished = StopResult(
        outcome=StopOutcome.ALREADY_FINISHED, detail="Cannot stop execution. Current state: SUCCESS"
    )
    assert (
        "already finished (Cannot stop execution. Current state: SUCCESS)"
        in stopping.after_stop(URL, "k1", stopping.EXECUTION_TIMEOUT, finished)[1]
    )
    level, line = stopping.after_stop(URL, "k1", stopping.CLEARED, StopResult(outcome=StopOutcome.UNKNOWN))
    assert level == logging.WARNING and "may still be running" in line


async def test_a_stop_runs_to_its_end_though_airflow_cancels_the_trigger_again_meanwhile():
    """Airflow 3.0-3.2 cancel a trigger again on every pass until it exits: the stop must not be cut."""
    import asyncio

    done = []

    async def stop() -> None:
        await asyncio.sleep(0.3)  # the state read, the status read, the POST
        done.append("stopped and logged")

    async def trigger() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await stopping.finish_despite_cancels(stop())
            raise

    task = asyncio.ensure_future(trigger())
    await asyncio.sleep(0.01)
    for _ in range(5):  # the first cancel, then one per pass of the triggerer's loop
        task.cancel()
        await asyncio.sleep(0.05)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == ["stopped and logged"]


async def test_a_stop_that_fails_is_logged_and_the_cancel_still_goes_through(caplog):
    import asyncio

    async def stop() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.WARNING):
        await stopping.finish_despite_cancels(stop())
    assert "Stopping failed: RuntimeError('boom')" in caplog.text
    assert not asyncio.current_task().cancelling()
