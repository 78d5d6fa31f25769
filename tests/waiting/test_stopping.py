"""When a crew task stops the execution it waits for, and the one log line that says so."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_crew.models import StopOutcome, StopResult
from airflow_provider_crew.waiting import stopping

URL = "https://crew.example.test"


@pytest.fixture(autouse=True)
def _new_process():
    stopping.forget_learned()
    yield
    stopping.forget_learned()


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
