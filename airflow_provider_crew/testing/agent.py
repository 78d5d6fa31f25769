"""The deterministic agent that "runs" crews, and the templates it fills.

The service never calls a model: :class:`DeterministicAgent` writes every step and task output from
the inputs, the earlier task outputs and all human feedback received so far, so tests can assert
exact text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .crew_spec import CrewSpec, TaskSpec

__all__ = [
    "AgentContext",
    "DeterministicAgent",
    "FeedbackNote",
    "StepRecord",
    "TaskOutcome",
    "render_template",
]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_template(template: Any, variables: Mapping[str, Any]) -> Any:
    """Fill ``{name}`` placeholders recursively; unknown placeholders stay as written.

    A string that is exactly one placeholder takes the variable's value with its type, so a
    structured template can produce lists and numbers (e.g. ``"{feedback_list}"``).
    """
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole and whole.group(1) in variables:
            return variables[whole.group(1)]
        return _PLACEHOLDER.sub(
            lambda m: _as_text(variables[m.group(1)]) if m.group(1) in variables else m.group(0), template
        )
    if isinstance(template, Mapping):
        return {str(k): render_template(v, variables) for k, v in template.items()}
    if isinstance(template, list | tuple):
        return [render_template(v, variables) for v in template]
    return template


@dataclass(frozen=True)
class FeedbackNote:
    """Human feedback as the agent sees it."""

    task_name: str
    text: str
    is_approve: bool


@dataclass(frozen=True)
class StepRecord:
    prompt: str
    thought: str
    tool: str
    tool_input: str
    result: str
    agent: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class TaskOutcome:
    raw: str
    json: dict[str, Any] | None
    summary: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class AgentContext:
    """What the agent knows while working on one task."""

    crew: CrewSpec
    task: TaskSpec
    inputs: Mapping[str, Any]
    earlier: Sequence[tuple[str, str]] = ()  # (task name, summary line) of accepted earlier tasks
    feedback: Sequence[FeedbackNote] = ()
    attempt: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


def _tokens(text: str) -> int:
    # A stable stand-in for a tokenizer: about four characters per token.
    return max(1, len(text) // 4)


class DeterministicAgent:
    """Writes outputs that depend only on their context, so tests can predict them exactly.

    Task output (plain text) has this shape, one fact per line::

        <task> by <agent> (attempt N): <expected output, rendered>
        task: <description, rendered>
        inputs: a=1; b=2
        context: <first line of an earlier task>     (one line per accepted earlier task)
        feedback: <text>                             (one line per feedback round so far)
    """

    def variables(self, ctx: AgentContext) -> dict[str, Any]:
        feedback_texts = [f.text for f in ctx.feedback]
        variables: dict[str, Any] = {
            "crew": ctx.crew.name,
            "task": ctx.task.name,
            "agent": ctx.task.agent,
            "attempt": ctx.attempt,
            "feedback": "; ".join(feedback_texts),
            "feedback_list": feedback_texts,
            "feedback_count": len(feedback_texts),
            "context": [summary for _, summary in ctx.earlier],
        }
        variables.update(ctx.extra)
        variables.update({str(k): v for k, v in ctx.inputs.items()})
        return variables

    def step(self, ctx: AgentContext, number: int) -> StepRecord:
        """The ``number``-th (1-based) thought/action of the task's agent."""
        variables = self.variables(ctx)
        task = ctx.task
        tool = task.tools[(number - 1) % len(task.tools)]
        prompt = render_template(task.description, variables) or task.name
        subject = ", ".join(f"{k}={_as_text(v)}" for k, v in sorted(ctx.inputs.items())) or "no inputs"
        of = "endless" if task.endless else task.steps
        thought = f"Step {number}/{of} of {task.name} (attempt {ctx.attempt}): use {tool} on {subject}"
        tool_input = json.dumps({"query": prompt, "step": number}, ensure_ascii=False)
        result = f"{tool} result {number} for {task.name}"
        return StepRecord(
            prompt=prompt,
            thought=thought,
            tool=tool,
            tool_input=tool_input,
            result=result,
            agent=task.agent,
            prompt_tokens=_tokens(prompt) + _tokens(thought),
            completion_tokens=_tokens(result),
        )

    def write(self, ctx: AgentContext) -> TaskOutcome:
        variables = self.variables(ctx)
        task = ctx.task
        description = render_template(task.description, variables)
        expected = render_template(task.expected_output, variables) or "done"
        summary = f"{task.name} by {task.agent} (attempt {ctx.attempt}): {expected}"
        prompt_tokens = _tokens(description) + sum(_tokens(s) for _, s in ctx.earlier)
        if task.output_template is not None:
            variables["summary"] = summary
            rendered = render_template(task.output_template, variables)
            data = rendered if isinstance(rendered, dict) else {"value": rendered}
            raw = json.dumps(data, ensure_ascii=False)
            return TaskOutcome(raw, data, summary, prompt_tokens, _tokens(raw))
        lines = [summary, f"task: {description}"]
        lines.append(
            "inputs: " + "; ".join(f"{k}={_as_text(v)}" for k, v in sorted(ctx.inputs.items()))
            if ctx.inputs
            else "inputs: (none)"
        )
        lines.extend(f"context: {line}" for _, line in ctx.earlier)
        lines.extend(f"feedback: {note.text}" for note in ctx.feedback)
        raw = "\n".join(lines)
        return TaskOutcome(raw, None, summary, prompt_tokens, _tokens(raw))
