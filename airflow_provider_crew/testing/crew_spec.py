"""A crew's definition as data: its inputs and its tasks, in order (built by :mod:`.crews`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_EVENT_BATCH_SECONDS",
    "DEFAULT_EVENT_BATCH_SIZE",
    "DEFAULT_PENDING_SECONDS",
    "DEFAULT_STEPS",
    "DEFAULT_STEP_SECONDS",
    "CrewInput",
    "CrewSpec",
    "TaskSpec",
]

DEFAULT_STEPS = 2
DEFAULT_STEP_SECONDS = 0.05
DEFAULT_PENDING_SECONDS = 0.05
DEFAULT_EVENT_BATCH_SECONDS = 0.5
DEFAULT_EVENT_BATCH_SIZE = 100


@dataclass(frozen=True)
class CrewInput:
    """One input the crew declares. Only required inputs are checked at kickoff."""

    name: str
    required: bool = True
    default: Any = None


@dataclass(frozen=True)
class TaskSpec:
    """One task of a crew, run in declaration order."""

    name: str
    agent: str
    description: str = ""
    expected_output: str = ""
    steps: int = DEFAULT_STEPS
    # None means "use the crew's default"; resolved by CrewSpec.
    step_seconds: float | None = None
    human_input: bool = False
    fails: bool = False
    error: str = "Task failed"
    # Fail only when every listed input has the given value (lets one crew file drive both outcomes).
    fail_when: Mapping[str, Any] | None = None
    tools: tuple[str, ...] = ("search",)
    # A JSON-like template; when set, the task output is structured (output_json / result_json).
    output_template: Any = None
    # Run steps forever (``steps`` is ignored) until the execution is stopped: a crew that never ends.
    endless: bool = False
    # Tools that raise when this task's agent uses them: tool_usage_error events instead of finished.
    failing_tools: tuple[str, ...] = ()

    def should_fail(self, inputs: Mapping[str, Any]) -> bool:
        if self.fails:
            return True
        if self.fail_when:
            return all(inputs.get(k) == v for k, v in self.fail_when.items())
        return False


@dataclass(frozen=True)
class CrewSpec:
    """A whole crew: its inputs and its tasks in order."""

    name: str
    tasks: tuple[TaskSpec, ...]
    inputs: tuple[CrewInput, ...] = ()
    description: str = ""
    pending_seconds: float = DEFAULT_PENDING_SECONDS
    step_seconds: float = DEFAULT_STEP_SECONDS
    # Fault rules (dicts in the FaultRule.from_dict shape) armed whenever this crew is served.
    faults: tuple[Mapping[str, Any], ...] = ()
    # Pause at human_input tasks even when the kickoff gave no human-input webhook (the contract says a
    # crew pauses only with one; a service that ignores that is what this plays).
    pause_without_webhook: bool = False
    # Tokens spent per (wall-clock) second while the execution is RUNNING, on top of the per-step
    # tokens; 0 turns it off. Nothing is spent while PENDING, PAUSED or finished.
    tokens_per_second: float = 0.0
    # Whether the status record carries usage_metrics: off plays a service that reports no usage.
    reports_usage: bool = True
    # The ``webhooks`` event stream: a batch goes out after ``event_batch_seconds`` (wall clock) or
    # at ``event_batch_size`` events, whichever comes first, and at the end of the execution.
    event_batch_seconds: float = DEFAULT_EVENT_BATCH_SECONDS
    event_batch_size: int = DEFAULT_EVENT_BATCH_SIZE
    # Deliver out of order (each batch shuffled, every other batch held back) / some deliveries twice.
    shuffle_events: bool = False
    repeat_events: bool = False
    # Also call crewWebhookUrl when an execution fails (off: only the event stream tells of a failure).
    completion_webhook_on_failure: bool = False
    # Off plays a service without the event stream: it accepts a ``webhooks`` object and sends nothing.
    sends_events: bool = True

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    def missing_inputs(self, given: Mapping[str, Any]) -> list[str]:
        return [i.name for i in self.inputs if i.required and given.get(i.name) is None]

    def with_defaults(self, given: Mapping[str, Any]) -> dict[str, Any]:
        merged = {i.name: i.default for i in self.inputs if not i.required and i.default is not None}
        merged.update(given)
        return merged

    def seconds_per_step(self, task: TaskSpec) -> float:
        return self.step_seconds if task.step_seconds is None else task.step_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputs": [{"name": i.name, "required": i.required, "default": i.default} for i in self.inputs],
            "pending_seconds": self.pending_seconds,
            "step_seconds": self.step_seconds,
            "faults": [dict(f) for f in self.faults],
            "pause_without_webhook": self.pause_without_webhook,
            "tokens_per_second": self.tokens_per_second,
            "reports_usage": self.reports_usage,
            "event_batch_seconds": self.event_batch_seconds,
            "event_batch_size": self.event_batch_size,
            "shuffle_events": self.shuffle_events,
            "repeat_events": self.repeat_events,
            "completion_webhook_on_failure": self.completion_webhook_on_failure,
            "sends_events": self.sends_events,
            "tasks": [
                {
                    "name": t.name,
                    "agent": t.agent,
                    "description": t.description,
                    "expected_output": t.expected_output,
                    "steps": t.steps,
                    "step_seconds": self.seconds_per_step(t),
                    "human_input": t.human_input,
                    "fails": t.fails,
                    "error": t.error,
                    "fail_when": dict(t.fail_when) if t.fail_when else None,
                    "tools": list(t.tools),
                    "output_template": t.output_template,
                    "endless": t.endless,
                    "failing_tools": list(t.failing_tools),
                }
                for t in self.tasks
            ],
        }
