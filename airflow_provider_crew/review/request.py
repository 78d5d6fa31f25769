"""What a reviewer reads: a round's request, in Markdown, and the two answers it offers (plain
functions, without I/O: the round asks, :mod:`.answer` waits for and reads the answer).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_crew.status import CrewStatus

if TYPE_CHECKING:
    from airflow_provider_crew.review.record import RoundRecord

APPROVE = "Approve"
REQUEST_CHANGES = "Request changes"
OPTIONS = [APPROVE, REQUEST_CHANGES]
FEEDBACK_PARAM = "feedback"
# The request shows at most this many characters of the output; XCom ``review_request`` has it whole.
OUTPUT_BODY_LIMIT = 20_000


def review_body(
    task: Any,
    kickoff_id: str,
    status: CrewStatus,
    earlier: Sequence[RoundRecord],
    *,
    retried: bool,
    stops_crew: bool,
) -> str:
    """The Markdown the reviewer reads, one section after another: why it asks, the output, inputs,
    progress, earlier rounds (``earlier``: their records), how to answer. ``task``: the round;
    ``retried``: an earlier try of this round ended without an answer applied; ``stops_crew``: no
    answer in time stops the execution (``stop_crew`` and the connection's ``stop_executions``) rather
    than leaving it paused.
    """
    sections = [
        _header(task, kickoff_id, crew_task_name(status)),
        _asked_again(earlier, retried),
        _output(status),
        _inputs(task.inputs),
        _progress(status),
        _earlier_rounds(earlier),
        _how_to_answer(task, stops_crew),
    ]
    return "\n".join(line for section in sections for line in section)


def crew_task_name(status: CrewStatus) -> str:
    """The paused crew task's name as the reviewer knows it (its id when the service gives no name)."""
    last = status.raw.get("last_executed_task")
    name = last.get("name") if isinstance(last, Mapping) else None
    return str(name or status.paused_task_id or "?")


# Each section is a list of lines (all but the last end with a blank line), or empty when it has
# nothing to say.


def _header(task: Any, kickoff_id: str, crew_task: str) -> list[str]:
    return [
        f"**Review round {task.round_number} of {len(task.round_task_ids)}**: crew execution "
        f"`{kickoff_id}` waits for your review of task **{_inline(crew_task)}**.",
        "",
    ]


def _asked_again(earlier: Sequence[RoundRecord], retried: bool) -> list[str]:
    """Why the reviewer sees this output again: the last round's answer, or a try, was not applied."""
    last = earlier[-1] if earlier else None
    if last is not None and not last.get("applied"):
        why = f"round {last['round']}'s answer was not applied. {last.get('note', '')}"
        return [f"> **Asked again:** {why}", ""]
    if retried:
        return ["> **Asked again:** an earlier try of this round ended before an answer was applied.", ""]
    return []


def _output(status: CrewStatus) -> list[str]:
    """The output in a code fence longer than any backtick run in it, so that it shows verbatim."""
    text = status.paused_task_output or "(the service reported no output)"
    if len(text) > OUTPUT_BODY_LIMIT:
        text = f"{text[:OUTPUT_BODY_LIMIT]}\n… ({len(text) - OUTPUT_BODY_LIMIT} more characters in XCom)"
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return ["### Output", "", f"{fence}text\n{text}\n{fence}", ""]


def _inputs(inputs: Any) -> list[str]:
    if not isinstance(inputs, Mapping) or not inputs:
        return []
    items = [f"- **{_inline(name)}**: {_inline(value)}" for name, value in inputs.items()]
    return ["### Inputs", "", *items, ""]


def _progress(status: CrewStatus) -> list[str]:
    progress = status.progress.describe() if status.progress else ""
    return ["### Progress", "", progress, ""] if progress else []


def _earlier_rounds(earlier: Sequence[RoundRecord]) -> list[str]:
    if not earlier:
        return []
    lines = ["### Earlier rounds", ""]
    for record in earlier:
        who = (record.get("responded_by") or {}).get("name") or "time-out default"
        outcome = "" if record.get("applied") else " (not applied)"
        feedback = record.get("feedback") or "(no feedback)"
        answer = record.get("answer")
        lines.append(f"{record['round']}. {answer} by {_inline(who)}{outcome}: {_inline(feedback)}")
    return [*lines, ""]


def _how_to_answer(task: Any, stops_crew: bool) -> list[str]:
    round_number, total_rounds = task.round_number, len(task.round_task_ids)
    if round_number == total_rounds:
        request_changes = (
            f"- **{REQUEST_CHANGES}**: this is the last review round, so the feedback is *not* sent: the "
            "task fails and the crew stays paused until someone raises max_rounds or resumes it."
        )
    else:
        request_changes = (
            f"- **{REQUEST_CHANGES}**: say what to change in *Feedback* (required); the crew redoes the "
            f"task with it and round {round_number + 1} asks you about the new output."
        )
    return [
        "### How to answer",
        "",
        f"- **{APPROVE}**: the crew continues (feedback optional, added as context).",
        request_changes,
        f"- {_timeout_text(task.response_timeout, task.approve_on_timeout, stops_crew)}",
    ]


def _timeout_text(response_timeout: timedelta | None, approve_on_timeout: bool, stops_crew: bool) -> str:
    if response_timeout is None:
        return "No time limit."
    within = duration_text(response_timeout)
    if approve_on_timeout:
        return f"Without an answer within {within}, the output is approved."
    if stops_crew:
        return f"Without an answer within {within}, this task fails and stops the crew execution."
    return f"Without an answer within {within}, this task fails and the crew execution stays paused."


def duration_text(value: timedelta) -> str:
    """``24 hours``, ``90 minutes``, ``45 seconds``: how a person says a time limit."""
    total = int(value.total_seconds())
    for unit, size in (("hour", 3600), ("minute", 60)):
        if total >= size and total % size == 0:
            count = total // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{total} second{'s' if total != 1 else ''}"


def _inline(value: Any) -> str:
    """The value on one line, its whitespace runs as single spaces and ``|`` escaped."""
    text = value if isinstance(value, str) else repr(value)
    return " ".join(text.split()).replace("|", "\\|")
