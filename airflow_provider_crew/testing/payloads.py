"""The bodies of the contract's webhooks (step, task, crew, human input), built from an execution.

The engine decides when each is sent (:meth:`~.engine.Engine._emit`); the kinds and their fields
are listed in docs/local-crew-service.md ("Webhooks").
"""

from __future__ import annotations

from typing import Any

from .agent import StepRecord, TaskOutcome, render_template
from .execution import Execution

__all__ = ["crew_payload", "human_input_payload", "step_payload", "task_payload"]


def step_payload(ex: Execution, step: StepRecord) -> dict[str, Any]:
    return {
        "prompt": step.prompt,
        "thought": step.thought,
        "tool": step.tool,
        "tool_input": step.tool_input,
        "result": step.result,
        "kickoff_id": ex.kickoff_id,
        "meta": ex.meta,
    }


def task_payload(
    ex: Execution, index: int, outcome: TaskOutcome, variables: dict[str, Any]
) -> dict[str, Any]:
    task = ex.crew.tasks[index]
    return {
        "description": render_template(task.description, variables),
        "name": task.name,
        "expected_output": render_template(task.expected_output, variables),
        "summary": outcome.summary,
        "agent": task.agent,
        "output": outcome.raw,
        "output_json": outcome.json,
        "kickoff_id": ex.kickoff_id,
        "meta": ex.meta,
    }


def crew_payload(ex: Execution) -> dict[str, Any]:
    """The crew (completion) webhook; that of a failed execution adds ``error``."""
    usage = ex.usage_metrics()
    payload = {
        "kickoff_id": ex.kickoff_id,
        "result": ex.result,
        "result_json": ex.result_json,
        "token_usage": {
            "total_tokens": usage["total_tokens"],
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
        },
        "meta": ex.meta,
    }
    if ex.error is not None:
        payload["error"] = ex.error
    return payload


def human_input_payload(ex: Execution, index: int, outcome: TaskOutcome) -> dict[str, Any]:
    return {
        "execution_id": ex.kickoff_id,
        "task_id": ex.task_ids[index],
        "task_output": outcome.raw,
        "kickoff_id": ex.kickoff_id,
        "meta": ex.meta,
    }
