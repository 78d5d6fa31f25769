"""Reading a reviewer's answer, without Airflow's task machinery: who and when, whether it still
applies to the execution, and the feedback the crew gets."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_crew.exceptions import CrewError
from airflow_provider_crew.operators.base import why_answer_is_outdated
from airflow_provider_crew.review.answer import answer_from_event, feedback_for_crew
from airflow_provider_crew.review.record import ReviewAnswer
from tests.review.test_request import OUTPUT, TASK_ID, paused


def read(event: Any) -> ReviewAnswer:
    answer = answer_from_event(event)
    assert answer is not None
    return answer


def test_an_answer_is_read_with_who_and_when():
    event = {
        "chosen_options": ["Request changes"],
        "params_input": {"feedback": "Shorter"},
        "responded_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
        "responded_by_user": {"id": "ana", "name": "Ana"},
    }
    assert read(event) == {
        "answer": "Request changes",
        "is_approve": False,
        "feedback": "Shorter",
        "responded_by": {"id": "ana", "name": "Ana"},
        "responded_at": "2026-01-01T00:00:00+00:00",
        "timed_out": False,
    }
    default = read({"chosen_options": ["Approve"], "params_input": None, "timedout": True})
    assert (default["is_approve"], default["feedback"], default["timed_out"]) == (True, "", True)


def test_no_answer_in_time_is_no_answer():
    # What that does to the execution is the round's (tests/review/test_round.py).
    assert answer_from_event({"error": "t", "error_type": "timeout"}) is None


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (None, "Expected a human-in-the-loop event, got None."),
        ({"error": "boom", "error_type": "other"}, r"The review request failed \(other\): boom"),
        ({"chosen_options": ["Maybe"]}, "Expected exactly one of"),
        ({"chosen_options": ["Approve", "Approve"]}, "Expected exactly one of"),
    ],
)
def test_malformed_answers_fail_clearly(event, message):
    with pytest.raises(CrewError, match=message):
        read(event)


def test_an_answer_applies_only_while_the_execution_waits_on_the_reviewed_output():
    assert why_answer_is_outdated(paused(), TASK_ID, OUTPUT) is None
    assert "different output" in (why_answer_is_outdated(paused("redone"), TASK_ID, OUTPUT) or "")
    assert "moved on" in (why_answer_is_outdated(paused(state="RUNNING"), TASK_ID, OUTPUT) or "")


@pytest.mark.parametrize(
    ("feedback", "timed_out", "sent"),
    [
        ("  Shorter  ", False, "Shorter"),
        ("", False, "Approved."),
        ("", True, "Approved automatically: no answer within 0:01:00."),
    ],
)
def test_the_crew_always_gets_feedback(feedback, timed_out, sent):
    answer = read(
        {"chosen_options": ["Approve"], "params_input": {"feedback": feedback}, "timedout": timed_out}
    )
    assert feedback_for_crew(answer, timedelta(minutes=1)) == sent
