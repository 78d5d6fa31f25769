"""Crews as data, and the deterministic agent that "runs" them.

A crew is declared in a JSON or YAML file, a Python dict or a :class:`CrewSpec`. The service never
calls a model: :class:`DeterministicAgent` writes every step and task output from the inputs, the
earlier task outputs and all human feedback received so far, so tests can assert exact text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BUILTIN_CREWS_DIR",
    "CrewDefinitionError",
    "CrewInput",
    "CrewSpec",
    "DeterministicAgent",
    "FeedbackNote",
    "StepRecord",
    "TaskOutcome",
    "TaskSpec",
    "builtin_crew_names",
    "load_crew",
    "render_template",
]

BUILTIN_CREWS_DIR = Path(__file__).with_name("crews")

DEFAULT_STEPS = 2
DEFAULT_STEP_SECONDS = 0.05
DEFAULT_PENDING_SECONDS = 0.05


class CrewDefinitionError(ValueError):
    """A crew definition is malformed; the message names the offending field."""


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
                }
                for t in self.tasks
            ],
        }


# --------------------------------------------------------------------------------------------------
# Loading


def builtin_crew_names() -> list[str]:
    """Names of the example crews shipped in ``airflow_provider_crew/testing/crews``."""
    return sorted(p.stem for p in BUILTIN_CREWS_DIR.iterdir() if p.suffix in (".json", ".yaml", ".yml"))


CrewSource = CrewSpec | Mapping[str, Any] | str | Path


def load_crew(source: CrewSource) -> CrewSpec:
    """Load a crew from a CrewSpec, a dict, a JSON/YAML file path, or a built-in crew name."""
    if isinstance(source, CrewSpec):
        return source
    if isinstance(source, Mapping):
        return crew_from_dict(source)
    path = Path(source)
    if not path.is_file() and isinstance(source, str) and "/" not in source and "\\" not in source:
        # A bare name such as "review" means a built-in example crew.
        for suffix in (".json", ".yaml", ".yml"):
            candidate = BUILTIN_CREWS_DIR / f"{path.name}{suffix}"
            if path.suffix == "" and candidate.is_file():
                path = candidate
                break
    if not path.is_file():
        raise CrewDefinitionError(
            f"crew file {str(source)!r} not found (built-in crews: {', '.join(builtin_crew_names())})"
        )
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml  # imported lazily: only YAML crews need it
        except ImportError as exc:  # pragma: no cover - pyyaml ships with Airflow
            raise CrewDefinitionError("PyYAML is needed to read YAML crew files") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CrewDefinitionError(f"{path}: invalid YAML: {exc}") from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CrewDefinitionError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise CrewDefinitionError(f"{path}: a crew file must hold an object")
    data = dict(data)
    data.setdefault("name", path.stem)
    return crew_from_dict(data)


def _expect(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise CrewDefinitionError(f"{where}: {what}")


def _number(value: Any, where: str) -> float:
    _expect(
        isinstance(value, int | float) and not isinstance(value, bool) and value >= 0,
        where,
        "must be a number >= 0",
    )
    return float(value)


def crew_from_dict(data: Mapping[str, Any]) -> CrewSpec:
    """Build and validate a CrewSpec from plain data (the crew file format)."""
    name = data.get("name")
    _expect(isinstance(name, str) and bool(name), "crew.name", "must be a non-empty string")
    assert isinstance(name, str)
    _expect(re.fullmatch(r"[A-Za-z0-9_.-]+", name) is not None, "crew.name", "use letters, digits, _ . -")
    known = {"name", "description", "inputs", "tasks", "pending_seconds", "step_seconds", "faults"}
    unknown = sorted(set(data) - known)
    _expect(not unknown, f"crew {name}", f"unknown fields {unknown}")

    inputs: list[CrewInput] = []
    raw_inputs = data.get("inputs", [])
    _expect(isinstance(raw_inputs, list), f"crew {name}.inputs", "must be a list")
    for n, item in enumerate(raw_inputs):
        where = f"crew {name}.inputs[{n}]"
        if isinstance(item, str):
            inputs.append(CrewInput(item))
        elif isinstance(item, Mapping):
            iname = item.get("name")
            _expect(isinstance(iname, str) and bool(iname), where, "name must be a non-empty string")
            assert isinstance(iname, str)
            inputs.append(CrewInput(iname, bool(item.get("required", True)), item.get("default")))
        else:
            raise CrewDefinitionError(f"{where}: must be a name or an object with a name")
    names = [i.name for i in inputs]
    _expect(len(set(names)) == len(names), f"crew {name}.inputs", "duplicate input names")

    step_seconds = _number(data.get("step_seconds", DEFAULT_STEP_SECONDS), f"crew {name}.step_seconds")
    pending = _number(data.get("pending_seconds", DEFAULT_PENDING_SECONDS), f"crew {name}.pending_seconds")

    raw_tasks = data.get("tasks")
    _expect(isinstance(raw_tasks, list) and bool(raw_tasks), f"crew {name}.tasks", "must be a non-empty list")
    assert isinstance(raw_tasks, list)
    tasks = [_task_from_dict(item, f"crew {name}.tasks[{n}]") for n, item in enumerate(raw_tasks)]
    tnames = [t.name for t in tasks]
    _expect(len(set(tnames)) == len(tnames), f"crew {name}.tasks", "duplicate task names")

    faults = data.get("faults", [])
    _expect(
        isinstance(faults, list) and all(isinstance(f, Mapping) for f in faults),
        f"crew {name}.faults",
        "must be a list of fault objects",
    )
    description = data.get("description", "")
    _expect(isinstance(description, str), f"crew {name}.description", "must be a string")
    return CrewSpec(
        name=name,
        tasks=tuple(tasks),
        inputs=tuple(inputs),
        description=description,
        pending_seconds=pending,
        step_seconds=step_seconds,
        faults=tuple(dict(f) for f in faults),
    )


def _task_from_dict(item: Any, where: str) -> TaskSpec:
    _expect(isinstance(item, Mapping), where, "must be an object")
    known = {
        "name",
        "agent",
        "description",
        "expected_output",
        "steps",
        "step_seconds",
        "human_input",
        "fails",
        "error",
        "fail_when",
        "tools",
        "output_template",
    }
    unknown = sorted(set(item) - known)
    _expect(not unknown, where, f"unknown fields {unknown}")
    for key in ("name", "agent"):
        _expect(isinstance(item.get(key), str) and bool(item.get(key)), f"{where}.{key}", "required string")
    for key in ("description", "expected_output", "error"):
        _expect(isinstance(item.get(key, ""), str), f"{where}.{key}", "must be a string")
    steps = item.get("steps", DEFAULT_STEPS)
    _expect(
        isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0, f"{where}.steps", "int >= 0"
    )
    step_seconds = item.get("step_seconds")
    if step_seconds is not None:
        step_seconds = _number(step_seconds, f"{where}.step_seconds")
    for key in ("human_input", "fails"):
        _expect(isinstance(item.get(key, False), bool), f"{where}.{key}", "must be true or false")
    fail_when = item.get("fail_when")
    _expect(fail_when is None or isinstance(fail_when, Mapping), f"{where}.fail_when", "must be an object")
    tools = item.get("tools", ["search"])
    _expect(
        isinstance(tools, list) and all(isinstance(t, str) for t in tools),
        f"{where}.tools",
        "must be a list of strings",
    )
    return TaskSpec(
        name=item["name"],
        agent=item["agent"],
        description=item.get("description", ""),
        expected_output=item.get("expected_output", ""),
        steps=steps,
        step_seconds=step_seconds,
        human_input=item.get("human_input", False),
        fails=item.get("fails", False),
        error=item.get("error", "Task failed"),
        fail_when=dict(fail_when) if fail_when else None,
        tools=tuple(tools) or ("search",),
        output_template=item.get("output_template"),
    )


# --------------------------------------------------------------------------------------------------
# Templates and the deterministic agent

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
        thought = (
            f"Step {number}/{task.steps} of {task.name} (attempt {ctx.attempt}): use {tool} on {subject}"
        )
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
