"""What the end of a wait pushes to XCom, and the log line that says so, without I/O.

The worker pushes these keys one by one; a trigger that ends its task itself sends the same keys and
values with its event (:mod:`airflow_provider_crew.triggers.crew`).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting.rules import Outcome, WaitResult

XCOM_RESULT = "result"
XCOM_STATUS = "status"
XCOM_HUMAN_INPUT = "human_input"
XCOM_USAGE = "usage"
OUTPUT_LOG_LIMIT = 2000


def shorten(value: Any, limit: int = OUTPUT_LOG_LIMIT, *, rest: str = "more characters") -> str:
    """``value`` as text for a log line, cut after ``limit`` characters with a note of how many more."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} {rest})"


def paused_task(status: CrewStatus, kickoff_id: str) -> dict[str, Any]:
    """What a reviewer needs to resume: the XCom value handed downstream on a pause."""
    return {
        "execution_id": kickoff_id,
        "task_id": status.paused_task_id,
        "task_output": status.paused_task_output,
    }


def result_xcoms(kickoff_id: str, result: WaitResult) -> dict[str, Any]:
    """What a wait that ended finished or paused pushes to XCom, by key, and the log line that says so.

    ``status`` (the last record), then ``human_input`` at a pause, or ``usage`` (when the service
    reported it) and ``result`` (the final output) at the end. The worker pushes them one by one; a
    trigger that ends the task itself sends them with its event: the same keys and values either way.
    """
    status = result.last_status
    xcoms: dict[str, Any] = {}
    if status is not None:
        xcoms[XCOM_STATUS] = status.raw
    if result.outcome is Outcome.PAUSED and status is not None:
        xcoms[XCOM_HUMAN_INPUT] = paused_task(status, kickoff_id)
        return xcoms
    if status is not None and status.usage is not None:
        # The shape of common.ai's ``usage`` XCom, so cost dashboards built for it read crews too.
        xcoms[XCOM_USAGE] = status.usage
    xcoms[XCOM_RESULT] = status.output if status is not None else None
    return xcoms


def end_log_line(kickoff_id: str, result: WaitResult) -> str:
    """The task log's line for a wait that ended finished or paused, with the output under review."""
    status = result.last_status
    if result.outcome is Outcome.PAUSED and status is not None:
        return (
            f"Crew execution {kickoff_id} is waiting for human input on task {status.paused_task_id!r}. "
            f"Its output:\n{shorten(status.paused_task_output, rest='more characters in XCom')}"
        )
    output = shorten(status.output if status is not None else None, rest="more characters in XCom")
    return f"Crew execution {kickoff_id} succeeded. Output:\n{output}"
