"""The wait rules shared by the trigger, the blocking wait and the sensor's poke, driven with a fake clock."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewNotFoundError,
    CrewRedirectError,
    CrewResponseTooLargeError,
    CrewServerError,
    CrewTransportError,
)
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.rules import Outcome, Poller, WaitFor, WaitResult, decide, wait_blocking

log = logging.getLogger("test")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def status(state: str, **fields) -> CrewStatus:
    return CrewStatus.from_response({"state": state, **fields})


def not_found() -> CrewNotFoundError:
    return CrewNotFoundError("404", endpoint="GET /x/status", status_code=404)


def run(responses, *, wait_for=WaitFor.COMPLETION, timeout=600.0, grace=60.0, clock=None, seen=False):
    clock = clock or FakeClock()
    poller = Poller(
        "k1",
        wait_for=wait_for,
        deadline=clock.now + timeout,
        not_found_deadline=clock.now + grace,
        poll_interval=2.0,
        max_poll_interval=15.0,
        log=log,
        clock=clock,
        execution_seen=seen,
    )
    feed = iter(responses)
    calls: list[str] = []

    def get_status(kickoff_id: str) -> CrewStatus:
        calls.append(kickoff_id)
        item = next(feed)
        if isinstance(item, Exception):
            raise item
        return item

    return wait_blocking(poller, get_status, sleep=clock.sleep), calls, clock


def test_waits_through_pending_and_running_to_success():
    result, calls, _ = run([status("PENDING"), status("RUNNING"), status("SUCCESS", result="out")])
    assert result.outcome is Outcome.SUCCEEDED
    assert result.last_status.output == "out"
    assert len(calls) == 3


def test_a_pause_keeps_a_completion_wait_going_but_ends_a_human_input_wait():
    paused = status("PAUSED", last_executed_task={"task_id": "t", "output": "o"})
    result, calls, _ = run([paused, paused, status("SUCCESS")], wait_for=WaitFor.COMPLETION)
    assert (result.outcome, len(calls)) == (Outcome.SUCCEEDED, 3)
    result, calls, _ = run([status("RUNNING"), paused], wait_for=WaitFor.HUMAN_INPUT)
    assert (result.outcome, result.last_status.paused_task_id, len(calls)) == (Outcome.PAUSED, "t", 2)


@pytest.mark.parametrize("state", ["FAILED", "REVOKED"])
def test_failure_ends_any_wait(state):
    result, _, _ = run([status(state, error="broke")], wait_for=WaitFor.HUMAN_INPUT)
    assert result.outcome is Outcome.FAILED
    assert result.last_status.error == "broke"


def test_404s_are_tolerated_within_the_grace_window_then_reported():
    result, calls, _ = run([not_found(), not_found(), status("SUCCESS")], grace=60)
    assert (result.outcome, len(calls)) == (Outcome.SUCCEEDED, 3)
    result, _, clock = run([not_found()] * 100, grace=10)
    assert result.outcome is Outcome.NOT_FOUND
    assert "not found" in result.message
    assert clock.now >= 1010


def test_a_404_after_the_execution_was_seen_ends_the_wait_at_once_saying_the_service_lost_it():
    # Well inside the grace: before, the 404 was taken for "still queued" and polled through.
    result, calls, clock = run(
        [status("RUNNING", progress={"completed": 1, "total": 3}), not_found(), status("SUCCESS")], grace=600
    )
    assert (result.outcome, len(calls)) == (Outcome.NOT_FOUND, 2)
    assert result.message.startswith(
        "The crew service no longer knows execution k1: it answered for this "
        "kickoff_id before (last seen: RUNNING - task 2 of 3) but now answers 404"
    )
    assert result.last_status.raw_state == "RUNNING"
    assert clock.now < 1000 + 600


def test_a_wait_told_the_execution_was_seen_fails_its_first_404():
    # A trigger built after the worker's read saw the execution starts out knowing it.
    result, calls, _ = run([not_found(), status("SUCCESS")], grace=600, seen=True)
    assert (result.outcome, len(calls)) == (Outcome.NOT_FOUND, 1)
    assert "no longer knows execution k1" in result.message
    assert "last seen" not in result.message  # this wait read no status itself


def test_seeing_the_execution_ends_the_grace_in_the_deadline_handed_to_a_trigger():
    clock = FakeClock()
    poller = Poller(
        "k",
        wait_for=WaitFor.COMPLETION,
        deadline=clock.now + 600,
        not_found_deadline=clock.now + 60,
        poll_interval=2.0,
        max_poll_interval=15.0,
        log=log,
        clock=clock,
    )
    poller.step(not_found())
    assert (poller.execution_seen, poller.not_found_deadline) == (False, 1060)
    clock.sleep(5)
    poller.step(status("PENDING"))
    assert (poller.execution_seen, poller.not_found_deadline) == (True, 1005)


@pytest.mark.parametrize(
    ("polled", "now", "seen", "expected"),
    [
        (not_found(), 1059.0, False, None),  # within the grace, never seen: a fresh kickoff still queued
        (not_found(), 1060.0, False, Outcome.NOT_FOUND),  # the grace counts to the deadline given
        (not_found(), 1001.0, True, Outcome.NOT_FOUND),  # seen before: the grace is over
        (CrewTransportError("down"), 1001.0, True, None),
        (CrewTransportError("down"), 1600.0, True, Outcome.TIMEOUT),
        (CrewAuthenticationError("401", endpoint="e", status_code=401), 1001.0, False, Outcome.ERROR),
        (status("RUNNING"), 1599.0, True, None),
        (status("RUNNING"), 1600.0, True, Outcome.TIMEOUT),
        (status("PAUSED"), 1001.0, True, None),  # a completion wait goes on through a pause
        (status("SUCCESS"), 1600.0, True, Outcome.SUCCEEDED),  # an answer at the deadline still counts
    ],
)
def test_decide_is_one_pure_rule_table(polled, now, seen, expected):
    verdict = decide(
        polled,
        kickoff_id="k",
        wait_for=WaitFor.COMPLETION,
        now=now,
        deadline=1600.0,
        not_found_deadline=1060.0,
        execution_seen=seen,
        last_status=None,
    )
    assert (verdict.outcome if verdict else None) is expected


def test_transient_errors_keep_polling_and_permanent_ones_end_the_wait():
    transient = [CrewTransportError("down"), CrewServerError("500", endpoint="e", status_code=500)]
    result, calls, _ = run([*transient, status("SUCCESS")])
    assert (result.outcome, len(calls)) == (Outcome.SUCCEEDED, 3)
    result, calls, _ = run([CrewAuthenticationError("401", endpoint="e", status_code=401), status("SUCCESS")])
    assert (result.outcome, len(calls)) == (Outcome.ERROR, 1)


@pytest.mark.parametrize(
    "error",
    [
        CrewResponseTooLargeError("too large", endpoint="e", limit=64),
        CrewRedirectError("302 elsewhere", endpoint="e", status_code=302),
    ],
    ids=["body-over-the-cap", "refused-redirect"],
)
def test_an_answer_a_repeat_would_meet_again_ends_the_wait(error):
    result, calls, _ = run([error, status("SUCCESS")])
    assert (result.outcome, len(calls)) == (Outcome.ERROR, 1)


def test_timeout_reports_the_last_status_seen_and_never_sleeps_past_the_deadline():
    result, _, clock = run([status("RUNNING", progress={"completed": 1, "total": 3})] * 1000, timeout=30)
    assert result.outcome is Outcome.TIMEOUT
    assert "last seen: RUNNING - task 2 of 3" in result.message
    assert clock.now == pytest.approx(1030)


def test_poll_interval_grows_with_jitter_up_to_the_maximum_and_resets_on_change():
    clock = FakeClock()
    poller = Poller(
        "k",
        wait_for=WaitFor.COMPLETION,
        deadline=clock.now + 10_000,
        not_found_deadline=0,
        poll_interval=2.0,
        max_poll_interval=15.0,
        log=log,
        clock=clock,
    )
    delays = [poller.step(status("RUNNING")) for _ in range(12)]
    assert delays[0] == 2.0
    assert all(isinstance(d, float) and d <= 15.0 for d in delays)
    assert delays[-1] >= 12.0  # grown close to the cap (jitter takes at most 20% off)
    assert poller.step(status("PAUSED")) == 2.0  # a state change resets it


def test_state_changes_are_logged_once_not_per_poll(caplog):
    with caplog.at_level(logging.INFO, logger="test"):
        run([status("RUNNING")] * 5 + [status("SUCCESS")])
    lines = [r.getMessage() for r in caplog.records if r.name == "test"]
    assert lines == ["Crew execution k1: RUNNING", "Crew execution k1: SUCCESS"]


UNKNOWN_WARNING = (
    "Crew execution k1 reports state 'QUARANTINED', which this client does not know; treated as still "
    "running; the wait ends at its timeout unless the state changes."
)


def warnings_in(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test" and r.levelno == logging.WARNING]


def test_an_unknown_state_is_warned_of_once_per_wait_in_the_waits_own_log(caplog):
    """The local service's ``unknown_state`` fault answers QUARANTINED: the wait polls on, and says so
    once in its own log (the task's, or the trigger's), naming the word and how it is treated."""
    with caplog.at_level(logging.INFO):
        polls = [status("QUARANTINED")] * 3 + [status("RUNNING")] + [status("QUARANTINED")] * 50
        result, calls, _ = run(polls, timeout=120)
        assert result.outcome is Outcome.TIMEOUT and len(calls) > 5
        assert warnings_in(caplog) == [UNKNOWN_WARNING]
        # Not on the module's logger (the triggerer's own log), as before.
        assert not [r for r in caplog.records if r.name.startswith("airflow_provider_crew")]

        caplog.clear()
        run([status("QUARANTINED"), status("SUCCESS")])  # the next wait (another Poller) says it again
        assert warnings_in(caplog) == [UNKNOWN_WARNING]


def test_a_record_without_a_state_word_is_warned_of_too(caplog):
    with caplog.at_level(logging.INFO, logger="test"):
        run([CrewStatus.from_response({"progress": {}}), status("SUCCESS")])
    assert warnings_in(caplog) == [
        "Crew execution k1 reports no state word (no text in its 'state' or 'status'); treated as still "
        "running; the wait ends at its timeout unless the state changes."
    ]


def test_known_states_are_never_warned_of(caplog):
    with caplog.at_level(logging.INFO, logger="test"):
        run([status("PENDING"), status("STARTED"), status("PAUSED"), status("RUNNING"), status("SUCCESS")])
        run([status("RUNNING"), status("FAILED")])
    assert warnings_in(caplog) == []


def test_event_round_trip_and_validation():
    result = WaitResult(outcome=Outcome.SUCCEEDED, message="ok", last_status=status("SUCCESS", result="r"))
    payload = CrewWaitEvent.from_result("k1", result).payload()
    assert payload == {
        "outcome": "succeeded",
        "kickoff_id": "k1",
        "message": "ok",
        "record": {"state": "SUCCESS"},
        "output": "r",  # once: the record carries no copy
    }
    back = CrewWaitEvent.parse(payload).to_result()
    assert (back.outcome, back.last_status.output) == (Outcome.SUCCEEDED, "r")
    for bad in (None, "x", {"status": "exploded", "kickoff_id": "k", "message": ""}, {"kickoff_id": "k"}):
        with pytest.raises(Exception, match="crew status event"):
            CrewWaitEvent.parse(bad)


def test_an_event_naming_the_outcome_status_is_refused():
    # Before 1.0 the outcome was also read as "status"; 1.0 reads one name.
    stored = {"status": "paused", "kickoff_id": "k1", "message": "m", "record": None}
    with pytest.raises(Exception, match="Malformed crew status event"):
        CrewWaitEvent.parse(stored)


def test_wait_result_rejects_the_old_field_name():
    with pytest.raises(ValueError, match="status"):
        WaitResult(outcome=Outcome.SUCCEEDED, message="ok", status=status("SUCCESS"))


def test_unknown_wait_target_is_named():
    with pytest.raises(
        ValueError, match="wait_for='forever' is not known; use one of 'completion', 'human_input'"
    ):
        WaitFor.parse("forever")
