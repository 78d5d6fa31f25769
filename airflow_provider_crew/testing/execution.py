"""One execution's record: its state, progress, usage and human feedback, and its status body.

The states are those of :mod:`.engine`'s state machine, which alone moves an execution on;
``REVOKED`` is where ``POST /stop/{kickoff_id}`` leaves one.

Usage is the per-step tokens plus, for a crew with ``tokens_per_second``, tokens spent
continuously while RUNNING: every :meth:`Execution.touch` and every read counts the time since
the last mark as running time when the state seen then was RUNNING, so reads between steps see
the total grow, and it stays put while PENDING, PAUSED or finished.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

from .agent import TaskOutcome
from .crew_spec import CrewSpec, TaskSpec
from .event_stream import EventStream
from .faults import FaultRule

__all__ = [
    "FAILED",
    "FINAL_STATES",
    "PAUSED",
    "PENDING",
    "PENDING_HUMAN_INPUT",
    "REVOKED",
    "RUNNING",
    "SUCCESS",
    "Execution",
    "FeedbackRound",
    "HumanInputTarget",
    "PausedTask",
]

PENDING, RUNNING, PAUSED, SUCCESS, FAILED = "PENDING", "RUNNING", "PAUSED", "SUCCESS", "FAILED"
REVOKED = "REVOKED"  # stopped by request (POST /stop/{kickoff_id})
FINAL_STATES = (SUCCESS, FAILED, REVOKED)
PENDING_HUMAN_INPUT = "Pending Human Input"


@dataclass(frozen=True)
class HumanInputTarget:
    """Where and how to send human-input notifications (``humanInputWebhook`` at kickoff)."""

    url: str
    strategy: str | None = None  # "bearer", "basic" or None (no Authorization header)
    token: str | None = None
    username: str | None = None
    password: str | None = None

    def headers(self) -> dict[str, str]:
        if self.strategy == "bearer":
            return {"Authorization": f"Bearer {self.token}"}
        if self.strategy == "basic":
            pair = f"{self.username}:{self.password}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        return {}


@dataclass
class FeedbackRound:
    round: int
    task_id: str
    task_name: str
    attempt: int
    feedback: str
    is_approve: bool
    received_at: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PausedTask:
    """The task an execution is paused at for human input; ``Engine.resume`` wakes ``waiter``."""

    index: int
    task_id: str
    outcome: TaskOutcome
    waiter: asyncio.Future[bool]


@dataclass
class Execution:
    """One run of a crew. Mutated only in the serving loop."""

    kickoff_id: str
    crew: CrewSpec
    inputs: dict[str, Any]
    meta: Any
    webhooks: dict[str, str | None]
    human_input: HumanInputTarget | None
    token_kind: str
    task_ids: list[str]
    created_at: float = field(default_factory=time.time)
    state: str = PENDING
    status: str = "Execution queued"
    task_index: int = 0
    completed: int = 0
    attempts: list[int] = field(default_factory=list)
    accepted: list[tuple[TaskSpec, str, TaskOutcome, int]] = field(default_factory=list)
    last_step: dict[str, Any] | None = None
    last_executed_task: dict[str, Any] | None = None
    result: str = ""
    result_json: Any = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    feedback: list[FeedbackRound] = field(default_factory=list)
    finished_at: float | None = None
    polls: int = 0
    hidden_polls: int = 0
    hidden_rule: FaultRule | None = None
    paused: PausedTask | None = None
    paused_at: float | None = None  # when it last paused for human input (epoch seconds)
    runner: asyncio.Task[None] | None = None
    delivery_tail: asyncio.Task[None] | None = None
    events: EventStream | None = None  # the ``webhooks`` event stream, when the kickoff or a resume asked
    version: int = 0
    _status_cache: tuple[tuple[int, int], bytes] | None = None
    # Continuous spending (crew.tokens_per_second): seconds spent RUNNING, counted up to
    # ``_spend_mark`` (time.monotonic()); ``_spend_state`` is the state seen when it was counted.
    running_seconds: float = 0.0
    _spend_state: str = PENDING
    _spend_mark: float = field(default_factory=time.monotonic)

    def touch(self) -> None:
        """Record a change: call it after every change of state or of anything in the status body."""
        self._account()
        self.version += 1

    def _account(self) -> None:
        """Count the time since the last mark as running time if the state seen then was RUNNING."""
        now = time.monotonic()
        if self._spend_state == RUNNING:
            self.running_seconds += max(0.0, now - self._spend_mark)
        self._spend_mark = now
        self._spend_state = self.state

    def _spent(self) -> int:
        """Tokens spent at ``crew.tokens_per_second`` over the running time counted so far."""
        rate = self.crew.tokens_per_second
        return int(self.running_seconds * rate) if rate > 0 else 0

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    def current_task(self) -> TaskSpec | None:
        if self.state in (PENDING, SUCCESS) or self.task_index >= len(self.crew.tasks):
            return None
        return self.crew.tasks[self.task_index]

    def status_record(self) -> dict[str, Any]:
        """The status body, in the shape observed on real deployments (usage as of now)."""
        self._account()
        return self._record()

    def _record(self) -> dict[str, Any]:
        current = self.current_task()
        record: dict[str, Any] = {
            "kickoff_id": self.kickoff_id,
            "state": self.state,
            "status": self.status,
            "result": self.result,
            "result_json": self.result_json,
            "progress": {
                "completed": self.completed,
                "total": len(self.crew.tasks),
                "current": current.name if current else None,
                "current_agent": current.agent if current else None,
            },
            "last_step": self.last_step,
            "last_executed_task": self.last_executed_task,
            "usage_metrics": self._usage(),
        }
        if not self.crew.reports_usage:
            del record["usage_metrics"]
        if self.state in (FAILED, REVOKED):
            record["error"] = self.error
        return record

    def status_bytes(self) -> bytes:
        # Polls vastly outnumber changes: serialise once per change. While tokens are being spent
        # the body also changes with time, so the spent count is part of the key.
        self._account()
        key = (self.version, self._spent())
        cache = self._status_cache
        if cache is not None and cache[0] == key:
            return cache[1]
        body = json.dumps(self._record(), ensure_ascii=False).encode()
        self._status_cache = (key, body)
        return body

    def usage_metrics(self) -> dict[str, int]:
        """Token usage as of now: per-step tokens plus those spent at ``crew.tokens_per_second``."""
        self._account()
        return self._usage()

    def _usage(self) -> dict[str, int]:
        spent = self._spent()
        spent_prompt = spent * 3 // 4  # 3/4 prompt, 1/4 completion; they add up to ``spent``
        prompt = self.prompt_tokens + spent_prompt
        completion = self.completion_tokens + (spent - spent_prompt)
        return {
            "total_tokens": prompt + completion,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "successful_requests": self.requests,
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything a test may want to assert on, including the feedback history."""
        data = self.status_record()
        data.update(
            {
                "crew": self.crew.name,
                "inputs": self.inputs,
                "meta": self.meta,
                "token_kind": self.token_kind,
                "created_at": self.created_at,
                "finished_at": self.finished_at,
                "webhooks": dict(self.webhooks),
                "human_input_webhook": (
                    {"url": self.human_input.url, "strategy": self.human_input.strategy}
                    if self.human_input
                    else None
                ),
                "task_ids": {t.name: tid for t, tid in zip(self.crew.tasks, self.task_ids, strict=True)},
                "attempts": {t.name: a for t, a in zip(self.crew.tasks, self.attempts, strict=True)},
                "tasks": [
                    {
                        "task_id": tid,
                        "name": t.name,
                        "agent": t.agent,
                        "attempt": attempt,
                        "output": o.raw,
                        "output_json": o.json,
                    }
                    for t, tid, o, attempt in self.accepted
                ],
                "feedback": [f.to_dict() for f in self.feedback],
                "paused_task_id": self.paused.task_id if self.paused else None,
                "paused_at": self.paused_at,
                # wall-clock seconds spent RUNNING (what crew.tokens_per_second is charged on)
                "running_seconds": self.running_seconds,
                "polls": self.polls,
                "event_webhooks": self.events.target.describe() if self.events else None,
                "events_sent": len(self.events.sent) if self.events else 0,
                "hidden_polls_left": self.hidden_polls,
            }
        )
        return data
