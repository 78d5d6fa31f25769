"""The events of the ``webhooks`` stream, built as the engine runs an execution.

Names and ``data`` fields follow crewAI's event bus (``crewai/events/types/``). Every event's
``data`` carries ``crew_name``, ``task_id``, ``task_name``, ``agent_id`` and ``agent_role``
(``None`` where not known: the crew events). Each agent step is one model call and one tool use;
each task's output is one more model call, so the ``usage`` of the ``llm_call_completed`` events
adds up to the execution's per-step and per-task tokens (its ``usage_metrics`` when the crew has
no ``tokens_per_second``), and their count to ``successful_requests``. Prompts, messages and
outputs are sent in full: hiding them is the receiver's business. Delivery is :mod:`.event_stream`'s.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from .agent import AgentContext, StepRecord, TaskOutcome, render_template
from .execution import Execution

__all__ = [
    "MODEL",
    "crew_completed",
    "crew_failed",
    "crew_started",
    "settle",
    "step",
    "task_done",
    "task_failed",
    "task_started",
]

MODEL = "local/deterministic-agent"
TOOL_CLASS = "LocalTool"


def _ids(ex: Execution, index: int | None) -> dict[str, Any]:
    if index is None:
        return {
            "crew_name": ex.crew.name,
            "task_id": None,
            "task_name": None,
            "agent_id": None,
            "agent_role": None,
        }
    task = ex.crew.tasks[index]
    agent_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{ex.kickoff_id}/agents/{task.agent}")
    return {
        "crew_name": ex.crew.name,
        "task_id": ex.task_ids[index],
        "task_name": task.name,
        "agent_id": str(agent_id),
        "agent_role": task.agent,
    }


def _emit(ex: Execution, event_type: str, index: int | None, **data: Any) -> None:
    stream = ex.events
    if stream is not None and stream.wants(event_type):
        stream.emit(event_type, {**_ids(ex, index), **data})


def settle(ex: Execution) -> None:
    """An idle point (paused, stopped, ended): deliver whatever is pending now."""
    if ex.events is not None:
        ex.events.flush(final=True)


# -- crew


def crew_started(ex: Execution) -> None:
    _emit(ex, "crew_kickoff_started", None, inputs=dict(ex.inputs))


def crew_completed(ex: Execution) -> None:
    total = ex.usage_metrics()["total_tokens"]
    _emit(ex, "crew_kickoff_completed", None, output=ex.result, total_tokens=total)
    settle(ex)


def crew_failed(ex: Execution) -> None:
    _emit(ex, "crew_kickoff_failed", None, error=ex.error)
    settle(ex)


# -- tasks and their agents


def task_started(ex: Execution, index: int, ctx: AgentContext, variables: dict[str, Any]) -> None:
    if ex.events is None:
        return
    task = ex.crew.tasks[index]
    context = "\n".join(summary for _, summary in ctx.earlier)
    _emit(ex, "task_started", index, context=context)
    prompt = render_template(task.description, variables) or task.name
    _emit(ex, "agent_execution_started", index, task_prompt=prompt, tools=list(task.tools))


def task_done(
    ex: Execution, index: int, ctx: AgentContext, variables: dict[str, Any], outcome: TaskOutcome
) -> None:
    """The model call that wrote the task's output, then the agent's and the task's completion."""
    if ex.events is None:
        return
    task = ex.crew.tasks[index]
    description = render_template(task.description, variables)
    lines = [description, *(f"Context: {summary}" for _, summary in ctx.earlier)]
    lines.extend(f"Feedback: {note.text}" for note in ctx.feedback)
    _llm_call(ex, index, "\n".join(lines), outcome.raw, outcome.prompt_tokens, outcome.completion_tokens)
    _emit(ex, "agent_execution_completed", index, output=outcome.raw)
    output = {
        "description": description,
        "name": task.name,
        "expected_output": render_template(task.expected_output, variables),
        "summary": outcome.summary,
        "raw": outcome.raw,
        "json_dict": outcome.json,
        "agent": task.agent,
        "output_format": "json" if outcome.json is not None else "raw",
    }
    _emit(ex, "task_completed", index, output=output)


def task_failed(ex: Execution, index: int, error: str) -> None:
    _emit(ex, "agent_execution_error", index, error=error)
    _emit(ex, "task_failed", index, error=error)


# -- model calls and tools


def step(ex: Execution, index: int, record: StepRecord) -> None:
    """One agent step: a model call that picks a tool, then the tool's use."""
    if ex.events is None:
        return
    _llm_call(ex, index, record.prompt, record.thought, record.prompt_tokens, record.completion_tokens)
    try:
        args: Any = json.loads(record.tool_input)
    except ValueError:
        args = record.tool_input
    tool = {"tool_name": record.tool, "tool_args": args, "tool_class": TOOL_CLASS, "run_attempts": 1}
    stream = ex.events
    started_at = stream.stamp()
    _emit(ex, "tool_usage_started", index, **tool)
    if record.tool in ex.crew.tasks[index].failing_tools:
        error = f"Tool {record.tool} failed: the local crew service's crew says this tool fails"
        _emit(ex, "tool_usage_error", index, **tool, error=error)
        return
    finished = {"started_at": started_at, "finished_at": stream.stamp(), "from_cache": False}
    _emit(ex, "tool_usage_finished", index, **tool, **finished, output=record.result)


def _llm_call(
    ex: Execution, index: int, prompt: str, response: str, prompt_tokens: int, completion_tokens: int
) -> None:
    agent = ex.crew.tasks[index].agent
    messages = [
        {"role": "system", "content": f"You are {agent}."},
        {"role": "user", "content": prompt},
    ]
    call = {"call_id": str(uuid.uuid4()), "model": MODEL, "messages": messages}
    _emit(ex, "llm_call_started", index, **call)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "cached_prompt_tokens": 0,
    }
    _emit(
        ex,
        "llm_call_completed",
        index,
        **call,
        response=response,
        call_type="llm_call",
        usage=usage,
        finish_reason="stop",
        response_id=f"local-{uuid.uuid4().hex[:24]}",
    )
