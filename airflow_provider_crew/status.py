"""An execution's status record, read the same way whatever the service's version answers.

Deployed services differ in where they put the state, the output, the paused task and the token
counts (docs/contract.md, "Status record: how it is read"): :meth:`CrewStatus.from_response` reads
every variant into one normalised record and keeps the service's own (``raw``). No Airflow import.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class CrewState(str, enum.Enum):
    """An execution's state, normalised across service versions."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING_FOR_HUMAN_INPUT = "waiting_for_human_input"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (CrewState.SUCCEEDED, CrewState.FAILED)


_SUCCESS_WORDS = frozenset({"success", "succeeded", "completed", "complete", "finished", "done"})
_FAILURE_WORDS = frozenset({"failed", "failure", "error", "errored", "revoked", "cancelled", "canceled"})
_PAUSED_WORDS = frozenset({"paused", "pending human input", "pending_human_input", "waiting_for_human_input"})
_PENDING_WORDS = frozenset({"pending", "queued", "received"})
_RUNNING_WORDS = frozenset(
    {"started", "running", "in_progress", "in progress", "retry", "retrying", "resumed"}
)
#: How a state word the client does not know is treated; the wait that meets one logs it once.
UNKNOWN_STATE_TREATMENT = "treated as still running; the wait ends at its timeout unless the state changes"


def known_state(raw: str | None) -> CrewState | None:
    """The CrewState of a service's ``state``/``status`` word, or None for a word the client does not
    know (and for no word)."""
    word = (raw or "").strip().lower()
    if word in _SUCCESS_WORDS:
        return CrewState.SUCCEEDED
    if word in _FAILURE_WORDS:
        return CrewState.FAILED
    if word in _PAUSED_WORDS:
        return CrewState.WAITING_FOR_HUMAN_INPUT
    if word in _PENDING_WORDS:
        return CrewState.PENDING
    if word in _RUNNING_WORDS:
        return CrewState.RUNNING
    return None


class CrewProgress(BaseModel):
    """How far an execution got: tasks done of total, the current task and agent."""

    completed: int | None = None
    total: int | None = None
    current_task: str | None = None
    current_agent: str | None = None

    @classmethod
    def from_record(cls, progress: Any) -> CrewProgress | None:
        if not isinstance(progress, Mapping):
            return None
        completed = progress.get("completed", progress.get("completed_tasks"))
        total = progress.get("total", progress.get("total_tasks"))
        return cls(
            completed=completed if isinstance(completed, int) else None,
            total=total if isinstance(total, int) else None,
            current_task=text_or_none(progress.get("current") or progress.get("current_task")),
            current_agent=text_or_none(progress.get("current_agent") or progress.get("agent")),
        )

    def describe(self) -> str:
        parts = []
        if self.total:
            done = self.completed or 0
            # "task n of m": the one being worked on is the one after those completed.
            parts.append(f"task {min(done + 1, self.total)} of {self.total}")
        if self.current_task:
            parts.append(f"'{self.current_task}'")
        if self.current_agent:
            parts.append(f"by {self.current_agent}")
        return " ".join(parts)


def text_or_none(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


class CrewStatus(BaseModel):
    """One status record, normalised; ``raw`` keeps the service's record whole."""

    model_config = ConfigDict(frozen=True)

    state: CrewState
    raw_state: str | None = None
    # False when the record's state word is one the client does not know (or it has none): ``state``
    # is then RUNNING, and the wait logs the word once (docs/contract.md).
    state_known: bool = True
    message: str | None = None
    output: Any = None
    progress: CrewProgress | None = None
    last_step: str | None = None
    paused_task_id: str | None = None
    paused_task_output: str | None = None
    error: str | None = None
    raw: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_response(cls, record: Any) -> CrewStatus:
        """Parse any observed status record (docs/contract.md, "Status record: how it is read")."""
        if not isinstance(record, Mapping):
            raise ValueError(f"status response is not a JSON object: {record!r}")
        raw_state = record.get("state")
        status_text = record.get("status")
        if not isinstance(raw_state, str) or not raw_state.strip():
            raw_state = status_text if isinstance(status_text, str) else None
        known = known_state(raw_state)
        # An unknown word counts as running: polling on is safer than failing on a word a newer
        # service added; the wait that reads one says so in its own log (``state_known``).
        state = CrewState.RUNNING if known is None else known
        # Some versions put the state in 'state' and a message in 'status'; keep the message.
        message = status_text if isinstance(status_text, str) and status_text != raw_state else None

        last_task = record.get("last_executed_task")
        last_task = last_task if isinstance(last_task, Mapping) else {}
        paused_task_id = paused_task_output = None
        if state is CrewState.WAITING_FOR_HUMAN_INPUT:
            # The contract names no field for the paused task; services report it as the last
            # executed task, sometimes also in a dedicated object.
            pending = record.get("pending_human_input") or record.get("human_input") or {}
            pending = pending if isinstance(pending, Mapping) else {}
            paused_task_id = text_or_none(
                pending.get("task_id")
                or last_task.get("task_id")
                or last_task.get("id")
                or last_task.get("name")
            )
            paused_task_output = text_or_none(
                pending.get("task_output") or pending.get("output") or last_task.get("output")
            )

        error = record.get("error")
        if state is CrewState.FAILED and not error:
            error = message or raw_state
        last_step = record.get("last_step")
        return cls(
            state=state,
            raw_state=raw_state,
            state_known=known is not None,
            message=message,
            output=cls._final_output(record, last_task) if state is CrewState.SUCCEEDED else None,
            progress=CrewProgress.from_record(record.get("progress")),
            last_step=_describe_step(last_step),
            paused_task_id=paused_task_id,
            paused_task_output=paused_task_output,
            error=text_or_none(error),
            raw=dict(record),
        )

    @staticmethod
    def _final_output(record: Mapping[str, Any], last_task: Mapping[str, Any]) -> Any:
        """``result_json``, else ``result`` (a string or ``result.output``), else the last task's output."""
        result_json = record.get("result_json")
        if result_json not in (None, "", {}):
            return result_json
        result = record.get("result")
        if isinstance(result, Mapping):
            if result.get("output") not in (None, ""):
                return result["output"]
        elif result not in (None, ""):
            return result
        return last_task.get("output")

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal

    @property
    def usage(self) -> dict[str, Any] | None:
        """The record's token counts (``usage_metrics``) in the shape of ``common.ai``'s ``usage`` XCom,
        or None without them. A crew reports no tool calls, cache writes or cost: those are None."""
        count = whole_counts(self.raw.get("usage_metrics"))
        if not count:
            return None
        prompt, completion = count.get("prompt_tokens"), count.get("completion_tokens")
        total = count.get("total_tokens", (prompt or 0) + (completion or 0) if prompt or completion else None)
        return {
            "requests": count.get("successful_requests"),
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": total,
            "tool_calls": None,
            "cache_read_tokens": count.get("cached_prompt_tokens"),
            "cache_write_tokens": None,
            "cost": None,
        }

    def describe(self) -> str:
        """One log line: state, task n of m, current task and agent, last step."""
        parts = [self.raw_state or self.state.value]
        if self.message:
            parts.append(f"({self.message})")
        if self.progress and (summary := self.progress.describe()):
            parts.append(f"- {summary}")
        if self.last_step:
            parts.append(f"- last step: {self.last_step}")
        return " ".join(parts)


def whole_counts(counts: Any) -> dict[str, int]:
    """The whole-number entries of a record of token counts (a bool is no count); {} for no record."""
    if not isinstance(counts, Mapping):
        return {}
    return {str(k): v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}


def _describe_step(step: Any) -> str | None:
    if isinstance(step, Mapping):
        text = step.get("thought") or step.get("action") or step.get("tool") or step.get("result")
        agent = step.get("agent")
        if text:
            text = shorten_text(str(text), 120)
            return f"{agent}: {text}" if agent else text
        return None
    return shorten_text(str(step), 120) if step else None


def shorten_text(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
