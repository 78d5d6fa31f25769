"""The crew service's event stream: what a delivery holds, and what the provider keeps of it.

A kickoff that subscribes (the crew connection's ``event_stream``) asks the service to post its events
to the api-server's receiver: ``{"events": [...]}`` batches, or one event a delivery with ``realtime``.
Delivery order is not guaranteed and a delivery may be repeated, so :class:`EventLog` orders by each
event's ``timestamp`` and counts each ``id`` once. What is kept per execution is bounded and holds no
prompt or message text unless the connection opts in (``event_stream_content``): a crew's prompts may
be private, and the Crew tab shows what is kept.

An event never ends a wait by itself: a failure (or a budget crossed in the events) wakes the wait, and
the woken task reads the status with the crew's token, as after any wake. No I/O, no Airflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: The events the provider asks for: the crew's end, what is at work, model calls and tool calls.
SUBSCRIBED_EVENTS = (
    "crew_kickoff_started",
    "crew_kickoff_completed",
    "crew_kickoff_failed",
    "task_started",
    "task_completed",
    "task_failed",
    "agent_execution_started",
    "agent_execution_completed",
    "agent_execution_error",
    "llm_call_completed",
    "llm_call_failed",
    "tool_usage_finished",
    "tool_usage_error",
)
#: The XCom key under which the api-server keeps a task instance's :class:`EventLog`.
XCOM_CREW_EVENTS = "crew_events"
#: Events after which the wait reads the status at once (the service's status says how it ended).
ENDING_EVENTS = frozenset({"crew_kickoff_failed", "crew_kickoff_completed"})
#: Bounds of what one execution keeps (the receiver stores it beside the task instance).
RECENT_CALLS = 10
SEEN_IDS = 500
#: Bounds of one delivery: more events than this are refused whole (413), as is a larger body.
MAX_EVENTS_PER_DELIVERY = 2000
MAX_TEXT = 500


class CrewEvent(BaseModel):
    """One event of a delivery; ``data`` is the event type's own (crewAI's event classes)."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=200)
    execution_id: str = Field(min_length=1, max_length=200)
    timestamp: datetime
    type: str = Field(min_length=1, max_length=100)
    data: dict[str, Any] = Field(default_factory=dict)


def parse_delivery(body: Any) -> tuple[list[CrewEvent], int]:
    """The well-formed events of a delivery's JSON body, and how many were skipped as malformed: one
    bad event does not lose the rest. Raises ``ValueError`` when the body is not ``{"events": [...]}``."""
    events = body.get("events") if isinstance(body, Mapping) else None
    if not isinstance(events, list):
        raise ValueError('the body must be a JSON object {"events": [...]}')
    if len(events) > MAX_EVENTS_PER_DELIVERY:
        raise ValueError(f"a delivery holds at most {MAX_EVENTS_PER_DELIVERY} events")
    parsed: list[CrewEvent] = []
    for raw in events:
        try:
            parsed.append(CrewEvent.model_validate(raw))
        except ValidationError:
            continue
    return parsed, len(events) - len(parsed)


def _text(value: Any) -> str | None:
    """A field shown on the tab: text, cut to :data:`MAX_TEXT` characters (the page escapes it)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text[:MAX_TEXT]


def _utc(moment: datetime) -> str:
    """``moment`` in UTC, ISO 8601: the kept times compare as text (a time without a zone is UTC)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(timezone.utc).isoformat()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class EventLog(BaseModel):
    """What the provider keeps of one execution's events (JSON, stored by the receiver).

    ``usage`` has the ``usage`` XCom's keys, summed over the model calls, so that
    :meth:`~airflow_provider_crew.waiting.budget.Budget.over` reads it as it reads a status's usage.
    """

    kickoff_id: str
    received: int = 0
    ended: str | None = None
    error: str | None = None
    task: str | None = None
    agent: str | None = None
    at_work_since: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    model_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    last_event_at: str | None = None
    seen: list[str] = Field(default_factory=list)

    def add(self, events: Iterable[CrewEvent], *, content: bool = False) -> list[CrewEvent]:
        """Add ``events`` of this execution not seen before, oldest first; returns them.

        :param content: Keep prompt and message text (the connection's ``event_stream_content``).
        """
        seen = set(self.seen)
        new = []
        for event in sorted(events, key=lambda event: event.timestamp):
            if event.execution_id != self.kickoff_id or event.id in seen:
                continue
            seen.add(event.id)
            self.seen.append(event.id)
            new.append(event)
            self._apply(event, content)
        del self.seen[:-SEEN_IDS]
        self.received += len(new)
        return new

    def _apply(self, event: CrewEvent, content: bool) -> None:
        at = _utc(event.timestamp)
        newest = self.last_event_at is None or at >= self.last_event_at
        data = event.data
        if event.type in ENDING_EVENTS:
            self.ended = "failed" if event.type == "crew_kickoff_failed" else "completed"
            self.error = _text(data.get("error")) or self.error
        elif event.type in ("task_started", "agent_execution_started") and at >= (self.at_work_since or at):
            # The latest start is what is at work, whatever order the starts came in.
            self.task = _text(data.get("task_name") or data.get("task_description")) or self.task
            self.agent = _text(data.get("agent_role")) or self.agent
            self.at_work_since = at
        elif event.type == "llm_call_completed" or event.type == "llm_call_failed":
            self._model_call(event, at, content)
        elif event.type in ("tool_usage_finished", "tool_usage_error"):
            call = {"at": at, "tool": _text(data.get("tool_name")), "ok": event.type == "tool_usage_finished"}
            if event.type == "tool_usage_error":
                call["error"] = _text(data.get("error"))
            self.tool_calls = _recent(self.tool_calls, call)
        if newest:
            self.last_event_at = at

    def _model_call(self, event: CrewEvent, at: str, content: bool) -> None:
        data = event.data
        reported = data.get("usage")
        usage: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        tokens = _count(usage.get("total_tokens")) or prompt + completion
        for key, count in (
            ("input_tokens", prompt),
            ("output_tokens", completion),
            ("total_tokens", tokens),
            ("cache_read_tokens", _count(usage.get("cached_prompt_tokens"))),
        ):
            self.usage[key] = self.usage.get(key, 0) + count
        call: dict[str, Any] = {"at": at, "model": _text(data.get("model")), "tokens": tokens}
        if event.type == "llm_call_failed":
            call["error"] = _text(data.get("error"))
        if content:
            call["response"] = _text(data.get("response"))
        self.model_calls = _recent(self.model_calls, call)


def _recent(calls: list[dict[str, Any]], call: dict[str, Any]) -> list[dict[str, Any]]:
    """The :data:`RECENT_CALLS` latest of ``calls`` and ``call``, by time."""
    return sorted([*calls, call], key=lambda kept: kept["at"])[-RECENT_CALLS:]
