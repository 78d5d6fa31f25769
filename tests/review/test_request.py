"""What a reviewer reads, without Airflow's task machinery: a round's request, section by section."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_crew.review.request import OUTPUT_BODY_LIMIT, crew_task_name, review_body
from airflow_provider_crew.status import CrewStatus

KICKOFF_ID = "0b6f3c1e-0000-4000-8000-000000000001"
TASK_ID = "f253f8b5-7aa3-5716-be72-c3c845d3e87b"
OUTPUT = "draft_task by Writer (attempt 1): A draft about AI\ninputs: topic=AI"
INPUTS = {"topic": "AI", "audience": "engineers"}


def paused(
    output: str | None = OUTPUT, *, name: str | None = "draft_task", state: str = "PAUSED"
) -> CrewStatus:
    last: dict[str, Any] = {"task_id": TASK_ID, "agent": "Writer"}
    if name is not None:
        last["name"] = name
    if output is not None:
        last["output"] = output
    return CrewStatus.from_response(
        {
            "state": state,
            "status": "Pending Human Input",
            "progress": {"completed": 1, "total": 3, "current": "draft_task", "current_agent": "Writer"},
            "last_executed_task": last,
        }
    )


def body(
    earlier: list[dict[str, Any]] | None = None, *, status: CrewStatus | None = None, **kwargs: Any
) -> str:
    """The request of a round of 3 (round 2 unless told), with only the round's settings it reads."""
    settings = {"round_number": 2, "inputs": INPUTS, "response_timeout": None, "approve_on_timeout": False}
    flags = {"retried": kwargs.pop("retried", False), "stops_crew": kwargs.pop("stops_crew", False)}
    task = SimpleNamespace(round_task_ids=["round_1", "round_2", "round_3"], **(settings | kwargs))
    return review_body(task, KICKOFF_ID, status or paused(), earlier or [], **flags)


# -- the request ----------------------------------------------------------------------------------


def test_the_whole_request_reads_section_by_section():
    earlier = [
        {
            "round": 1,
            "answer": "Request changes",
            "feedback": "Shorter | please",
            "applied": True,
            "responded_by": {"id": "ana", "name": "Ana"},
        }
    ]
    assert body(earlier, response_timeout=timedelta(hours=24)) == (
        f"**Review round 2 of 3**: crew execution `{KICKOFF_ID}` waits for your review of task "
        "**draft_task**.\n"
        "\n"
        "### Output\n"
        "\n"
        f"```text\n{OUTPUT}\n```\n"
        "\n"
        "### Inputs\n"
        "\n"
        "- **topic**: AI\n"
        "- **audience**: engineers\n"
        "\n"
        "### Progress\n"
        "\n"
        "task 2 of 3 'draft_task' by Writer\n"
        "\n"
        "### Earlier rounds\n"
        "\n"
        "1. Request changes by Ana: Shorter \\| please\n"
        "\n"
        "### How to answer\n"
        "\n"
        "- **Approve**: the crew continues (feedback optional, added as context).\n"
        "- **Request changes**: say what to change in *Feedback* (required); the crew redoes the task with "
        "it and round 3 asks you about the new output.\n"
        "- Without an answer within 24 hours, this task fails and the crew execution stays paused."
    )


def test_sections_with_nothing_to_say_are_left_out():
    status = CrewStatus.from_response({"state": "PAUSED", "last_executed_task": {"task_id": TASK_ID}})
    text = body(status=status, inputs="{{ params.inputs }}")  # not rendered into a mapping
    assert f"review of task **{TASK_ID}**." in text.splitlines()[0]  # no name: the task's id
    assert "(the service reported no output)" in text
    for heading in ("### Inputs", "### Progress", "### Earlier rounds", "Asked again"):
        assert heading not in text
    assert text.endswith("- No time limit.")


def test_body_says_plainly_why_a_round_asks_again():
    earlier = [
        {
            "round": 1,
            "answer": "Request changes",
            "feedback": "",
            "applied": False,
            "note": "Changes were requested without feedback, so nothing was sent to the crew.",
        }
    ]
    text = body(earlier)
    assert (
        "**Asked again:** round 1's answer was not applied. Changes were requested without feedback" in text
    )
    assert "1. Request changes by time-out default (not applied): (no feedback)" in text
    retried = body(round_number=1, retried=True)
    assert "an earlier try of this round ended before an answer was applied" in retried


def test_last_round_says_changes_are_not_sent():
    text = body(round_number=3)
    assert "this is the last review round, so the feedback is *not* sent" in text
    assert "round 4" not in text


@pytest.mark.parametrize(
    ("response_timeout", "approve_on_timeout", "line"),
    [
        (None, False, "- No time limit."),
        (timedelta(hours=1), False, "- Without an answer within 1 hour, this task fails"),
        (timedelta(minutes=90), True, "- Without an answer within 90 minutes, the output is approved."),
        (timedelta(seconds=3601), False, "- Without an answer within 3601 seconds,"),
    ],
)
def test_the_time_limit_is_said_as_a_person_would(response_timeout, approve_on_timeout, line):
    text = body(response_timeout=response_timeout, approve_on_timeout=approve_on_timeout)
    assert text.splitlines()[-1].startswith(line)


def test_a_time_limit_that_stops_the_crew_says_so():
    text = body(response_timeout=timedelta(hours=1), stops_crew=True)
    assert (
        text.splitlines()[-1]
        == "- Without an answer within 1 hour, this task fails and stops the crew execution."
    )


def test_body_fence_outlasts_backticks_in_the_output():
    assert "`````text\ncode: ````x````\n`````" in body(status=paused("code: ````x````"))


def test_a_long_output_is_cut_in_the_request_only():
    text = body(status=paused("x" * (OUTPUT_BODY_LIMIT + 5)))
    assert f"```text\n{'x' * OUTPUT_BODY_LIMIT}\n… (5 more characters in XCom)\n```" in text


def test_inline_values_stay_on_one_line():
    text = body(inputs={"a|b": "two\n  lines", "n": 3})
    assert "- **a\\|b**: two lines\n- **n**: 3\n" in text


def test_crew_task_name_falls_back_to_the_id_then_a_question_mark():
    assert crew_task_name(paused()) == "draft_task"
    assert crew_task_name(paused(name=None)) == TASK_ID
    assert crew_task_name(CrewStatus.from_response({"state": "RUNNING"})) == "?"
