"""Crews as data: loading and checking crew definitions, and the built-in example crews.

A crew is declared in a JSON or YAML file, a Python dict or a :class:`CrewSpec`
(:mod:`.crew_spec`). The deterministic agent that "runs" crews is in :mod:`.agent`; both are
re-exported here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .agent import AgentContext, DeterministicAgent, FeedbackNote, StepRecord, TaskOutcome, render_template
from .crew_spec import (
    DEFAULT_EVENT_BATCH_SECONDS,
    DEFAULT_EVENT_BATCH_SIZE,
    DEFAULT_PENDING_SECONDS,
    DEFAULT_STEP_SECONDS,
    DEFAULT_STEPS,
    CrewInput,
    CrewSpec,
    TaskSpec,
)

__all__ = [
    "BUILTIN_CREWS_DIR",
    "AgentContext",
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


class CrewDefinitionError(ValueError):
    """A crew definition is malformed; the message names the offending field."""


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
    known = {
        "name",
        "description",
        "inputs",
        "tasks",
        "pending_seconds",
        "step_seconds",
        "faults",
        "pause_without_webhook",
        "tokens_per_second",
        "reports_usage",
        "sends_events",
        *EVENT_FIELDS,
    }
    unknown = sorted(set(data) - known)
    _expect(not unknown, f"crew {name}", f"unknown fields {unknown}")

    inputs = _inputs_from_list(data.get("inputs", []), f"crew {name}.inputs")

    step_seconds = _number(data.get("step_seconds", DEFAULT_STEP_SECONDS), f"crew {name}.step_seconds")
    pending = _number(data.get("pending_seconds", DEFAULT_PENDING_SECONDS), f"crew {name}.pending_seconds")
    tokens_per_second = _number(data.get("tokens_per_second", 0), f"crew {name}.tokens_per_second")
    _expect(math.isfinite(tokens_per_second), f"crew {name}.tokens_per_second", "must be a finite number")

    raw_tasks = data.get("tasks")
    _expect(isinstance(raw_tasks, list) and bool(raw_tasks), f"crew {name}.tasks", "must be a non-empty list")
    assert isinstance(raw_tasks, list)
    tasks = [_task_from_dict(item, f"crew {name}.tasks[{n}]") for n, item in enumerate(raw_tasks)]
    tnames = [t.name for t in tasks]
    _expect(len(set(tnames)) == len(tnames), f"crew {name}.tasks", "duplicate task names")
    _check_endless_paces(tasks, step_seconds, f"crew {name}.tasks")

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
        pause_without_webhook=_flag(data, "pause_without_webhook", False, f"crew {name}"),
        tokens_per_second=tokens_per_second,
        reports_usage=_flag(data, "reports_usage", True, f"crew {name}"),
        sends_events=_flag(data, "sends_events", True, f"crew {name}"),
        **_event_settings(data, f"crew {name}"),
    )


EVENT_FIELDS = (
    "event_batch_seconds",
    "event_batch_size",
    "shuffle_events",
    "repeat_events",
    "completion_webhook_on_failure",
)


def _event_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The crew's event-stream fields (see :class:`CrewSpec`), checked, as CrewSpec keywords."""
    seconds = _number(
        data.get("event_batch_seconds", DEFAULT_EVENT_BATCH_SECONDS), f"{where}.event_batch_seconds"
    )
    _expect(math.isfinite(seconds), f"{where}.event_batch_seconds", "must be a finite number")
    size = data.get("event_batch_size", DEFAULT_EVENT_BATCH_SIZE)
    _expect(
        isinstance(size, int) and not isinstance(size, bool) and size >= 1,
        f"{where}.event_batch_size",
        "must be an int >= 1",
    )
    flags = {f: _flag(data, f, False, where) for f in EVENT_FIELDS[2:]}
    return {"event_batch_seconds": seconds, "event_batch_size": size, **flags}


def _names(item: Mapping[str, Any], key: str, default: list[str], where: str) -> tuple[str, ...]:
    """A list-of-strings field (``tools``, ``failing_tools``) as a tuple."""
    names = item.get(key, default)
    _expect(
        isinstance(names, list) and all(isinstance(t, str) for t in names),
        f"{where}.{key}",
        "must be a list of strings",
    )
    return tuple(names)


def _flag(data: Mapping[str, Any], field: str, default: bool, where: str) -> bool:
    """A true/false field of a crew definition, or its default."""
    value = data.get(field, default)
    _expect(isinstance(value, bool), f"{where}.{field}", "must be true or false")
    return bool(value)


def _check_endless_paces(tasks: list[TaskSpec], crew_step_seconds: float, where: str) -> None:
    """An endless task must wait between steps, or it would spin the event loop."""
    for n, t in enumerate(tasks):
        if t.endless:
            pace = crew_step_seconds if t.step_seconds is None else t.step_seconds
            _expect(pace > 0, f"{where}[{n}].step_seconds", "an endless task needs step_seconds > 0")


def _inputs_from_list(raw_inputs: Any, where: str) -> list[CrewInput]:
    _expect(isinstance(raw_inputs, list), where, "must be a list")
    inputs: list[CrewInput] = []
    for n, item in enumerate(raw_inputs):
        if isinstance(item, str):
            inputs.append(CrewInput(item))
        elif isinstance(item, Mapping):
            iname = item.get("name")
            _expect(
                isinstance(iname, str) and bool(iname), f"{where}[{n}]", "name must be a non-empty string"
            )
            assert isinstance(iname, str)
            inputs.append(CrewInput(iname, bool(item.get("required", True)), item.get("default")))
        else:
            raise CrewDefinitionError(f"{where}[{n}]: must be a name or an object with a name")
    names = [i.name for i in inputs]
    _expect(len(set(names)) == len(names), where, "duplicate input names")
    return inputs


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
        "endless",
        "failing_tools",
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
    for key in ("human_input", "fails", "endless"):
        _expect(isinstance(item.get(key, False), bool), f"{where}.{key}", "must be true or false")
    if item.get("endless", False):
        # It never reaches its end, so it can neither pause for review nor fail there.
        for key in ("human_input", "fails", "fail_when"):
            _expect(not item.get(key), f"{where}.{key}", "cannot be set on an endless task")
    fail_when = item.get("fail_when")
    _expect(fail_when is None or isinstance(fail_when, Mapping), f"{where}.fail_when", "must be an object")
    tools = _names(item, "tools", ["search"], where)
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
        endless=item.get("endless", False),
        failing_tools=_names(item, "failing_tools", [], where),
    )
