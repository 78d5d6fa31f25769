"""Reference tables of the provider's operators, sensors and triggers, generated from the code.

Each table row comes from the class itself: the ``__init__`` signatures along the class's own
bases (name, type annotation, default), ``template_fields`` (templated or not) and the
docstring's ``:param name:`` lines (meaning). What a task pushes to XCom comes from the
docstring's ``:xcom key:`` lines. Nothing is written twice.

Used three ways:

- the Sphinx directive ``.. crew-reference:: dotted.path.Class`` (the how-to pages' Reference sections);
- an ``autodoc-process-docstring`` hook, so the Python API reference shows the same tables;
- ``scripts/reference_tables.py``, which writes docs/api.md (every public name with its tables) and
  docs/metrics.md's table from it.

Importing this module does not import Sphinx.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

PACKAGE = "airflow_provider_crew"
# The subpackages whose public classes users put in DAGs (operators, sensors, the review's tasks) or
# meet in the triggerer (triggers). A module's __all__ says what is public; a name re-exported from
# where it moved is listed where it lives.
SUBPACKAGES = ("operators", "sensors", "review", "triggers")

# Defaults that are computed when the module is imported: show where they come from, not the
# value the documentation build happened to see.
COMPUTED_DEFAULTS = {
    "default_deferrable()": "``[operators] default_deferrable`` (False unless set)",
}
REQUIRED = "required"

_FIELD = re.compile(r"^:(?P<kind>param|xcom)\s+(?P<name>\w+):\s*(?P<text>.*)$")


@dataclass
class Parameter:
    """One row of a parameter table."""

    name: str
    type: str
    default: str
    templated: bool | None  # None: the class has no templating (triggers, functions)
    description: str


@dataclass
class Reference:
    """Everything the tables of one class (or task-group function) show."""

    path: str  # dotted path, e.g. airflow_provider_crew.operators.crew.CrewKickoffOperator
    kind: str  # "operator", "sensor", "trigger" or "function"
    summary: str  # the docstring's first paragraph
    parameters: list[Parameter]
    xcom: dict[str, str] = field(default_factory=dict)
    undocumented: list[str] = field(default_factory=list)  # in the signature, no :param line
    unknown: list[str] = field(default_factory=list)  # a :param line without such a parameter

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[1]


# -- reading the code ---------------------------------------------------------------------------


def import_object(path: str) -> Any:
    module_name, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module_name), attribute)


# Modules that do not import on the running Airflow version, with the reason; their classes are
# missing from public_classes() (the documentation site is built on the newest Airflow).
UNIMPORTABLE: dict[str, str] = {}


def public_classes() -> list[type]:
    """Every public operator, sensor and trigger class the provider defines, in a stable order."""
    from airflow.triggers.base import BaseTrigger

    from airflow_provider_crew._compat import BaseOperator

    found: list[type] = []
    for subpackage in SUBPACKAGES:
        package = importlib.import_module(f"{PACKAGE}.{subpackage}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            try:
                module = importlib.import_module(f"{package.__name__}.{info.name}")
            except Exception as error:  # a feature this Airflow version lacks (HITL before 3.1)
                optional = "OptionalProviderFeature" in type(error).__name__
                if not (isinstance(error, ImportError) or optional):
                    raise
                UNIMPORTABLE[f"{package.__name__}.{info.name}"] = str(error)
                continue
            # vars(), not getattr(): a module-level __getattr__ may serve deprecated names. A module's
            # __all__, when it has one, says what is public (a shared base class is not).
            public = getattr(module, "__all__", None)
            for name, value in sorted(vars(module).items()):
                if (
                    inspect.isclass(value)
                    and not name.startswith("_")
                    and (public is None or name in public)
                    and value.__module__ == module.__name__
                    and issubclass(value, (BaseOperator, BaseTrigger))
                ):
                    found.append(value)
    return found


def kind_of(obj: Any) -> str:
    if _decorated_operator(obj) is not None:
        return "decorator"
    if not inspect.isclass(obj):
        return "function"
    from airflow.triggers.base import BaseTrigger

    from airflow_provider_crew._compat import BaseSensorOperator

    if issubclass(obj, BaseTrigger):
        return "trigger"
    if issubclass(obj, BaseSensorOperator):
        return "sensor"
    from airflow_provider_crew._compat import BaseHook, BaseOperator

    if issubclass(obj, BaseHook):
        return "hook"
    if not issubclass(obj, BaseOperator):
        return "other"  # the review's task group, the execution link: no operator arguments
    return "operator"


def docstring_fields(doc: str | None) -> tuple[str, dict[str, str], dict[str, str]]:
    """The docstring's prose, its ``:param`` texts and its ``:xcom`` texts (continuations joined)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    prose: list[str] = []
    fields: dict[str, dict[str, str]] = {"param": {}, "xcom": {}}
    current: tuple[str, str] | None = None
    for line in lines:
        match = _FIELD.match(line)
        if match:
            current = (match["kind"], match["name"])
            fields[current[0]][current[1]] = match["text"].strip()
        elif current and line.startswith((" ", "\t")) and line.strip():
            kind, name = current
            fields[kind][name] = f"{fields[kind][name]} {line.strip()}".strip()
        elif current and not line.strip():
            current = None
        elif current is None or line.strip():
            current = None
            prose.append(line)
    return "\n".join(prose).strip(), fields["param"], fields["xcom"]


def _decorated_operator(obj: Any) -> type | None:
    """The operator a TaskFlow decorator (``@task.crew``) builds, which it names; None for others."""
    return None if inspect.isclass(obj) else getattr(obj, "decorated_operator_class", None)


# What the decorated function's call gives a TaskFlow task, rather than the decorator's arguments.
TASKFLOW_FILLED = {"op_args", "op_kwargs", "inputs"}


def _own_functions(obj: Any) -> list[Any]:
    """The ``__init__`` of the class and of each of its bases defined in this provider, leaf first;
    for a TaskFlow decorator, the decorator, then those of the operator it builds."""
    if (operator := _decorated_operator(obj)) is not None:
        return [obj, *_own_functions(operator)]
    if not inspect.isclass(obj):
        return [obj]
    functions = []
    for klass in obj.__mro__:
        if not klass.__module__.startswith(PACKAGE) or "__init__" not in vars(klass):
            continue
        functions.append(inspect.unwrap(vars(klass)["__init__"]))
    return functions


def _own_bases(obj: Any) -> list[type]:
    """The bases of a class defined in this provider, nearest first (none for a function; the
    operator and its bases for a TaskFlow decorator)."""
    if (operator := _decorated_operator(obj)) is not None:
        return [operator, *_own_bases(operator)]
    if not inspect.isclass(obj):
        return []
    return [klass for klass in obj.__mro__[1:] if klass.__module__.startswith(PACKAGE)]


def _default_sources(function: Any) -> dict[str, str]:
    """The source text of each default in ``function``'s signature, e.g. ``default_deferrable()``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return {}
    definition = next(
        node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    arguments = definition.args
    sources: dict[str, str] = {}
    positional = arguments.posonlyargs + arguments.args
    if arguments.defaults:
        with_defaults = positional[-len(arguments.defaults) :]
        for argument, default in zip(with_defaults, arguments.defaults, strict=True):
            sources[argument.arg] = ast.unparse(default)
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        if default is not None:
            sources[argument.arg] = ast.unparse(default)
    return sources


def format_default(value: Any, source: str | None) -> str:
    if source in COMPUTED_DEFAULTS:
        return COMPUTED_DEFAULTS[source]
    if isinstance(value, timedelta):
        total = value.total_seconds()
        hours = total / 3600
        return f"``{total:g}`` s ({hours:g} h)" if hours >= 1 else f"``{total:g}`` s"
    return f"``{value!r}``"


def format_type(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return f"``{text}``"


def reference(obj_or_path: Any) -> Reference:
    """Read one operator, sensor, trigger or task-group function's reference from its code."""
    obj = import_object(obj_or_path) if isinstance(obj_or_path, str) else obj_or_path
    path = f"{obj.__module__}.{obj.__qualname__}"
    summary, param_texts, xcom = docstring_fields(obj.__doc__)
    own_texts = dict(param_texts)
    for base in _own_bases(obj):  # a parameter a base class defines is documented there, once
        base_params, base_xcom = docstring_fields(base.__doc__)[1:]
        param_texts = {**base_params, **param_texts}
        if _decorated_operator(obj) is not None:  # a decorator pushes what its operator pushes
            xcom = {**base_xcom, **xcom}
        # A key a docstring names without a text means what a base class says of it, once.
        xcom = {key: text or base_xcom.get(key, "") for key, text in xcom.items()}
    summary = summary.split("\n\n", 1)[0].replace("\n", " ")
    templating = _decorated_operator(obj) or (obj if inspect.isclass(obj) else None)
    templated_fields = set(getattr(templating, "template_fields", ()) or ()) if templating else None
    skipped = TASKFLOW_FILLED if _decorated_operator(obj) is not None else set()
    parameters: list[Parameter] = []
    seen: set[str] = set()
    for function in _own_functions(obj):
        sources = _default_sources(function)
        for parameter in inspect.signature(function).parameters.values():
            if parameter.name in ("self", "cls") or parameter.name in seen or parameter.name in skipped:
                continue
            if parameter.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
                continue
            seen.add(parameter.name)
            description = param_texts.get(parameter.name, "")
            if parameter.default is inspect.Parameter.empty or description.startswith("Required."):
                default = REQUIRED
            else:
                default = format_default(parameter.default, sources.get(parameter.name))
            parameters.append(
                Parameter(
                    name=parameter.name,
                    type=format_type(parameter.annotation),
                    default=default,
                    templated=None if templated_fields is None else parameter.name in templated_fields,
                    description=description.removeprefix("Required.").strip(),
                )
            )
    # Airflow's own arguments (task_id, retries, timeout...) are documented by Airflow.
    documented_elsewhere = {"kwargs", "task_id", *skipped}
    return Reference(
        path=path,
        kind=kind_of(obj),
        summary=summary,
        parameters=parameters,
        xcom=xcom,
        undocumented=[p.name for p in parameters if not p.description],
        unknown=[name for name in own_texts if name not in seen and name not in documented_elsewhere],
    )


AIRFLOW_ARGUMENTS = {
    "operator": "It also takes the arguments of every Airflow operator (``task_id``, ``retries``, "
    "``pool``, ...).",
    "sensor": "It also takes the arguments of every Airflow sensor (``task_id``, ``timeout``, "
    "``mode``, ``soft_fail``, ``exponential_backoff``, ...).",
    "trigger": "Operators create it; DAG code does not. Every argument is a JSON value and none is a "
    "secret, so it survives a triggerer restart.",
    "function": "",
    "hook": "",
    "other": "",
    "decorator": "It also takes the arguments of every Airflow operator (``task_id``, ``retries``, "
    "``pool``, ...), and ``.override()``, ``.partial()`` and ``.expand()`` as ``@task`` does; "
    "``multiple_outputs`` stays False.",
}
INTERNAL = (
    "Crew tasks create it when they defer; DAG code does not. Every argument is a JSON value and none "
    "is a secret, so it survives a triggerer restart."
)
# A hook's methods a user calls; the form's class methods and the session behind get_conn are
# Airflow's business.
_NOT_FOR_USERS = frozenset({"get_ui_field_behaviour", "get_connection_form_widgets", "get_conn", "session"})


def _method_rows(path: str) -> list[str]:
    """A hook's public methods and properties, with their signatures and what they do (the docstring's
    first line). A property is shown without parentheses: it is read, not called."""
    klass = import_object(path)
    rows = ["| Method | Returns | What it does |", "|---|---|---|"]
    for name, value in vars(klass).items():
        is_property = isinstance(value, (property, functools.cached_property))
        if name.startswith("_") or name in _NOT_FOR_USERS or not (is_property or inspect.isfunction(value)):
            continue
        function = (value.fget if isinstance(value, property) else value.func) if is_property else value
        signature = inspect.signature(function)
        arguments = ", ".join(p for p in list(signature.parameters)[1:] if p not in ("kwargs",))
        returns = format_type(signature.return_annotation)
        first = (inspect.getdoc(function) or "").split("\n\n", 1)[0].replace("\n", " ")
        call = name if is_property else f"{name}({arguments})"
        rows.append(f"| `{call}` | {_markdown_text(returns)} | {_markdown_text(first)} |")
    return [*rows, ""] if len(rows) > 2 else []


NO_XCOM = {
    "trigger": "A trigger fires one event, which the deferred task's ``execute_complete`` reads; one "
    "that ends its task itself (nothing needs a worker at its end) first pushes the XComs the task "
    "would have pushed.",
}


# -- rendering ----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()) or "\\-"


def _templated(value: bool | None) -> str:
    return "yes" if value else "no"


def rst_lines(ref: Reference, *, heading_level: str | None = None) -> list[str]:
    """reST for one reference: a parameter table and an XCom table (``list-table``)."""
    lines: list[str] = []
    if heading_level:
        title = f"{ref.name}"
        lines += [title, heading_level * len(title), ""]
    has_templating = any(p.templated is not None for p in ref.parameters)
    columns = ["Parameter", "Type", "Default", *(["Templated"] if has_templating else []), "Meaning"]
    widths = ["19", "14", "13", *(["11"] if has_templating else []), "43"]
    lines += [
        f".. list-table:: Parameters of ``{ref.name}``",
        "   :header-rows: 1",
        "   :class: crew-reference",
        f"   :widths: {' '.join(widths)}",
        "",
        *(f"   {'*' if i == 0 else ' '} - {column}" for i, column in enumerate(columns)),
    ]
    for parameter in ref.parameters:
        cells = [f"``{parameter.name}``", parameter.type, parameter.default]
        if has_templating:
            cells.append(_templated(parameter.templated))
        cells.append(parameter.description)
        lines += [f"   {'*' if i == 0 else ' '} - {_cell(cell)}" for i, cell in enumerate(cells)]
    lines.append("")
    if AIRFLOW_ARGUMENTS[ref.kind]:
        lines += [AIRFLOW_ARGUMENTS[ref.kind], ""]
    if ref.xcom:
        lines += [
            f".. list-table:: XCom pushed by ``{ref.name}``",
            "   :header-rows: 1",
            "   :class: crew-reference",
            "   :widths: 22 78",
            "",
            "   * - Key",
            "     - Value",
        ]
        for key, text in ref.xcom.items():
            lines += [f"   * - ``{key}``", f"     - {_cell(text)}"]
        lines.append("")
    elif ref.kind in NO_XCOM:
        lines += [NO_XCOM[ref.kind], ""]
    return lines


def _markdown_text(text: str) -> str:
    role = r":(?:class|func|meth|attr|mod|ref|doc|data|exc|obj):`~?([^`]+)`"
    text = re.sub(role, lambda match: f"`{match[1].split('.')[-1]}`", text)
    text = text.replace("``", "`")
    return " ".join(text.split()).replace("|", "\\|")


def markdown(ref: Reference) -> str:
    """GitHub Markdown for one reference (for docs/api.md)."""
    has_templating = any(p.templated is not None for p in ref.parameters)
    header = ["Parameter", "Type", "Default", *(["Templated"] if has_templating else []), "Meaning"]
    rows = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for parameter in ref.parameters:
        cells = [f"`{parameter.name}`", parameter.type, parameter.default]
        if has_templating:
            cells.append(_templated(parameter.templated))
        cells.append(parameter.description)
        rows.append("| " + " | ".join(_markdown_text(cell) or "-" for cell in cells) + " |")
    if ref.kind == "trigger":  # internal: its arguments are no DAG author's words
        return f"**{ref.name}** (internal): {_markdown_text(ref.summary)} {_markdown_text(INTERNAL)}\n"
    parts = [f"**{ref.name}**: {_markdown_text(ref.summary)}", "", *rows, ""]
    if ref.kind == "hook":
        parts += _method_rows(ref.path)
    if AIRFLOW_ARGUMENTS[ref.kind]:
        parts += [_markdown_text(AIRFLOW_ARGUMENTS[ref.kind]), ""]
    if ref.xcom:
        parts += ["| XCom key | Value |", "|---|---|"]
        parts += [f"| `{key}` | {_markdown_text(text)} |" for key, text in ref.xcom.items()]
        parts.append("")
    elif ref.kind in NO_XCOM:
        parts += [_markdown_text(NO_XCOM[ref.kind]), ""]
    return "\n".join(parts)


# -- docs/api.md: the public API at a glance --------------------------------------------------------

# What a DAG uses, in the order a DAG author meets it: (dotted path, the import line's module).
API_TASKS = (
    "airflow_provider_crew.operators.crew.CrewKickoffOperator",
    "airflow_provider_crew.sensors.crew.CrewStatusSensor",
    "airflow_provider_crew.operators.resume.CrewResumeOperator",
    "airflow_provider_crew.review.group.crew_human_review",
    "airflow_provider_crew.decorators.crew.crew_task",
)
# The other public names, each at its one home.
API_OTHERS = (
    "airflow_provider_crew.review.group.CrewReviewGroup",
    "airflow_provider_crew.review.round.CrewReviewRoundOperator",
    "airflow_provider_crew.review.result.CrewReviewResultOperator",
    "airflow_provider_crew.hooks.crew.CrewHook",
    "airflow_provider_crew.hooks.webhook_receiver.CrewWebhookReceiverHook",
    "airflow_provider_crew.hooks.managed_agent.CrewManagedAgentHook",
    "airflow_provider_crew.triggers.crew.CrewStatusTrigger",
    "airflow_provider_crew.review.answer.CrewReviewAnswerTrigger",
    "airflow_provider_crew.links.crew.CrewExecutionLink",
)
# Where the function's names are imported from in DAG code (its package names it).
IMPORT_HOME = {"airflow_provider_crew.review.group": "airflow_provider_crew.review"}
# The parameters crew tasks share (operators/base.py: CrewTaskParameters, and the wait's): one
# meaning, one default.
SHARED_PARAMETERS = (
    "kickoff_id",
    "kickoff_task_id",
    "crew_conn_id",
    "task_webhook_url",
    "step_webhook_url",
    "crew_webhook_url",
    "human_input_webhook_url",
    "human_input_webhook_conn_id",
    "wait_for_completion",
    "on_human_input",
    "deferrable",
    "poll_interval",
    "max_poll_interval",
    "timeout",
    "stop_crew",
    "openlineage_include_values",
)
API_HEADER = """# API at a glance: every name, its import, its parameters and XCom

Every public name of the provider with the line that imports it, and, for every operator, sensor,
decorator and hook, a table of its parameters (type, default, templated or not, meaning) and of
what it pushes to XCom; then every error. Generated from the code by
`python scripts/reference_tables.py` (a test fails when this page and the code disagree). Every name
has one home: import it from the module shown. The signatures and docstrings themselves, with links
to the source, are in the [Python API reference](reference/api.rst).

**The rules a DAG author learns once**

- Every crew task that starts, watches or resumes an execution (the kickoff, `@task.crew`, the
  sensor, the resume) returns its **kickoff id**, so `kickoff_id=<any of them>.output` works
  everywhere; the review's tasks return what their own tables say. What the crew produced is in
  named XComs: `task.output["result"]` is the final output, `task.output["human_input"]` the paused
  task.
- A task that waits ends when the execution finishes or, by default, pauses for human input
  (`on_human_input="return"`); `"fail"` fails it **without retry** at a pause (a retry would start
  another execution), `"wait"` waits on for someone to resume it. `wait_for_completion=False` returns
  right after the `POST`.
- `poll_interval`, `max_poll_interval` and `timeout` mean the same on every crew task, with the same
  defaults; the sensor also takes Airflow's `poke_interval` as another name for `poll_interval`.
- Retries never start a second execution while one may still run (Airflow 3.3+ reattaches to it);
  only an execution that ended FAILED (or REVOKED) is started anew by a retry of the kickoff, which is
  what the retry is for.
- A mapped crew task's `result`, `human_input`, `usage` and `status`, taken as an XComArg
  (`kickoff.output["result"]`, `@task.crew`'s `["result"]`), are a list whose position *i* is map
  index *i*, with None where that instance pushed nothing (it ended at a pause, say), on every
  Airflow 3 minor: zip it with the inputs. `xcom_pull(task_ids=..., key=..., map_indexes=[0, 1, 2])`
  gives the same. The REST API lists only the entries pushed, each with its `map_index`: pair by that
  field, not by position. `.expand()` over such a key maps over the values pushed (the scheduler
  expands it, with Airflow's own reading).
- Templated booleans (`is_approve`) accept what Jinja renders: `True`/`False`, `true`/`false`.
- A task that owns its execution's wait stops the execution (`POST /stop/{kickoff_id}`) when
  something other than the crew ends the wait: `execution_timeout`, the wait's `timeout`, a user
  marking the task failed or success or clearing it (`stop_crew`; a sensor only watches, so it stops
  only with `stop_crew=True`). A retry that reattaches, a triggerer restart and a task that did not
  wait stop nothing, nor does anything when the connection's `stop_executions` is off.
- A crew task with asset `outlets` names its execution in each asset event's `extra`:
  `{"kickoff_id", "state", "execution_url", "usage"}`, `state` being `succeeded`, `paused` or, for a
  task that did not wait, `running`; `execution_url` and `usage` when known (the same values as the
  XComs of those names). A DAG scheduled on the asset reads it from `triggering_asset_events`.
"""


def _ref_or_none(path: str) -> Reference | None:
    try:
        return reference(path)
    except Exception as error:  # a feature this Airflow lacks (HITL before 3.1), an extra not installed
        UNIMPORTABLE[path] = str(error)
        return None


def _import_line(path: str) -> str:
    module, name = path.rsplit(".", 1)
    return f"from {IMPORT_HOME.get(module, module)} import {name}"


SAME_ON_EVERY_TASK = "As on every task: [The same words on every task](#the-same-words-on-every-task)."
# The keys every crew task that waits pushes, one text each (CrewWaitMixin's docstring).
SHARED_XCOM = ("return_value", "result", "human_input", "usage", "status", "execution_url", "crew_events")
SAME_XCOM = "As on every task: [Return values and XCom keys](#return-values-and-xcom-keys)."


def shared_meanings(refs: list[Reference]) -> dict[str, str]:
    """Each shared parameter's text where two or more tasks have it word for word (a base class's
    docstring holds it once, :class:`~airflow_provider_crew.operators.wait.CrewWaitMixin`'s say); a
    task that means more (the sensor's ``timeout``) keeps its own in its table."""
    meanings: dict[str, str] = {}
    for name in SHARED_PARAMETERS:
        texts = Counter(p.description for ref in refs for p in ref.parameters if p.name == name)
        common = texts.most_common(1)
        if common and common[0][1] >= 2:
            meanings[name] = common[0][0]
    return meanings


def _vocabulary_table(refs: list[Reference], meanings: dict[str, str]) -> list[str]:
    rows = ["| Parameter | " + " | ".join(f"`{ref.name}`" for ref in refs) + " | Meaning |"]
    rows.append("|---|" + "---|" * len(refs) + "---|")
    for name in SHARED_PARAMETERS:
        cells = []
        for ref in refs:
            found = next((p for p in ref.parameters if p.name == name), None)
            cells.append(_markdown_text(found.default) if found else "-")
        meaning = _markdown_text(meanings.get(name, "")) or "Each task's own table says it."
        if name in meanings and any(
            p.name == name and p.description != meanings[name] for ref in refs for p in ref.parameters
        ):
            meaning += " (Where a task's own table says more, that holds for it.)"
        rows.append(f"| `{name}` | " + " | ".join(cells) + f" | {meaning} |")
    return rows


def _pointing_to_shared(ref: Reference, meanings: dict[str, str], values: dict[str, str]) -> Reference:
    """``ref`` with each shared text replaced by a pointer to the table that holds it once."""
    parameters = [
        replace(p, description=SAME_ON_EVERY_TASK) if meanings.get(p.name) == p.description else p
        for p in ref.parameters
    ]
    xcom = {key: SAME_XCOM if values.get(key) == text else text for key, text in ref.xcom.items()}
    return replace(ref, parameters=parameters, xcom=xcom)


def _xcom_values(refs: list[Reference]) -> dict[str, str]:
    """Each key's text as the first task that pushes it says it (the kickoff, for the shared keys)."""
    keys: dict[str, str] = {}
    for ref in refs:
        for key, text in ref.xcom.items():
            keys.setdefault(key, text)
    return keys


def _xcom_table(refs: list[Reference]) -> list[str]:
    keys = _xcom_values(refs)
    rows = ["| XCom key | " + " | ".join(f"`{ref.name}`" for ref in refs) + " | Value |"]
    rows.append("|---|" + "---|" * len(refs) + "---|")
    for key, text in keys.items():
        marks = ["yes" if key in ref.xcom else "-" for ref in refs]
        rows.append(f"| `{key}` | " + " | ".join(marks) + f" | {_markdown_text(text)} |")
    return rows


def api_page() -> str:
    """docs/api.md: the shared vocabulary, then every public class and function with its tables."""
    tasks = [ref for ref in map(_ref_or_none, API_TASKS) if ref is not None]
    meanings = shared_meanings(tasks)
    lines = [API_HEADER, "## The same words on every task", "", *_vocabulary_table(tasks, meanings), ""]
    lines += [
        "## Return values and XCom keys",
        "",
        "The Value column says it as the kickoff pushes it; each task's own table below says when that "
        "task does.",
        "",
        *_xcom_table(tasks[:3]),
        "",
    ]
    lines += [
        "`crew_human_review` returns a `CrewReviewGroup`: `upstream >> review >> downstream` wires it "
        "like any task group; `review.output` is the result task's return value (the kickoff id) and "
        '`review.output["result"]` its final output.',
        "",
        "`@task.crew` (`crew_task`) is `CrewKickoffOperator` as a TaskFlow decorator: the function returns "
        "the inputs, and the call's XComArg is the task's output (the kickoff id; "
        '`["result"]`, `["human_input"]`, `["usage"]`, `["status"]` as above).',
        "",
    ]
    for path in (*API_TASKS, *API_OTHERS):
        ref = _ref_or_none(path)
        if ref is None:
            continue
        shared_xcom = {key: text for key, text in _xcom_values(tasks[:3]).items() if key in SHARED_XCOM}
        ref = _pointing_to_shared(ref, meanings, shared_xcom)
        lines += [f"## {ref.name}", "", "```python", _import_line(path), "```", "", markdown(ref)]
    lines += ["## Errors", "", "```python", "from airflow_provider_crew import exceptions", "```", ""]
    lines += ["| Error | Fails without retry | Meaning |", "|---|---|---|"]
    from airflow_provider_crew import exceptions
    from airflow_provider_crew._compat import AirflowFailException

    for name in sorted(n for n, v in vars(exceptions).items() if inspect.isclass(v) and n.startswith("Crew")):
        error = getattr(exceptions, name)
        if error.__module__ != exceptions.__name__:
            continue
        no_retry = "yes" if issubclass(error, AirflowFailException) else "no"
        first = (inspect.getdoc(error) or "").split("\n\n", 1)[0]
        lines.append(f"| `{name}` | {no_retry} | {_markdown_text(first)} |")
    lines += ["", *_managed_agent_errors()]
    lines += ["", "## Metrics", "", "```python", "from airflow_provider_crew.metrics import METRICS", "```"]
    lines += [
        "",
        "Every metric the provider emits through Airflow's `Stats`, and the two a team should alert on: "
        "[metrics.md](metrics.md), whose table is generated from `METRICS`.",
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"


METRICS_BEGIN = "<!-- BEGIN GENERATED: metrics table (python scripts/reference_tables.py) -->"
METRICS_END = "<!-- END GENERATED: metrics table -->"


def metrics_table() -> str:
    """docs/metrics.md's table: every metric of ``airflow_provider_crew.metrics.METRICS``."""
    from airflow_provider_crew.metrics import METRICS

    lines = [
        "| Metric | Type | Unit | Tags | Legacy name (plain StatsD) | Emitted by | Meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for metric in METRICS:
        name = f"**`{metric.name}`** (alert)" if metric.alert else f"`{metric.name}`"
        tags = ", ".join(f"`{tag}`" for tag in metric.tags)
        legacy = metric.name + "".join(f".<{tag}>" for tag in metric.legacy)
        row = (name, metric.type, metric.unit, tags, f"`{legacy}`", metric.emitted_by, metric.meaning)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def render_metrics_page(page: str) -> str:
    """``page`` (docs/metrics.md) with the text between the markers replaced by :func:`metrics_table`."""
    head, rest = page.split(METRICS_BEGIN, 1)
    _, tail = rest.split(METRICS_END, 1)
    return f"{head}{METRICS_BEGIN}\n\n{metrics_table()}\n\n{METRICS_END}{tail}"


def _managed_agent_errors() -> list[str]:
    """The managed agent's own errors, each a class of common.ai's contract (docs/managed-agent.md)."""
    path = "airflow_provider_crew.hooks.managed_agent"
    try:
        module = importlib.import_module(path)
    except Exception as error:  # the ai extra is not installed
        UNIMPORTABLE[path] = str(error)
        return []
    from airflow_provider_crew._compat import AirflowFailException

    lines = [
        "`CrewManagedAgentHook` raises these of its own, `common.ai`'s `ManagedAgentRejected` for inputs the "
        "model may rephrase, and the errors above for a time-out, a 429, a 5xx or an unreachable service "
        "(docs/managed-agent.md):",
        "",
        "```python",
        f"from {path} import CrewAgentUnavailableError",
        "```",
        "",
        "| Error | Base classes | Fails without retry | Meaning |",
        "|---|---|---|---|",
    ]
    for name, error in sorted(vars(module).items()):
        if inspect.isclass(error) and issubclass(error, Exception) and error.__module__ == path:
            bases = ", ".join(f"`{base.__name__}`" for base in error.__bases__)
            no_retry = "yes" if issubclass(error, AirflowFailException) else "no"
            first = (inspect.getdoc(error) or "").split("\n\n", 1)[0]
            lines.append(f"| `{name}` | {bases} | {no_retry} | {_markdown_text(first)} |")
    return lines


# -- Sphinx -------------------------------------------------------------------------------------


def setup(app: Any) -> dict[str, Any]:
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective
    from sphinx.util.nodes import nested_parse_with_titles

    class CrewReferenceDirective(SphinxDirective):
        """``.. crew-reference:: dotted.path`` renders that class's (or function's) tables."""

        required_arguments = 1

        def run(self) -> list[nodes.Node]:
            target = self.arguments[0]
            container = nodes.section()
            source = StringList(rst_lines(reference(target)), source=f"<crew-reference {target}>")
            nested_parse_with_titles(self.state, source, container)
            return container.children

    def process_docstring(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
        """In the API reference, show the generated tables in place of the raw field lines."""
        if what != "class" or not any(obj is klass for klass in public_classes()):
            return
        prose, _, _ = docstring_fields("\n".join(lines))
        lines[:] = [*prose.splitlines(), "", *rst_lines(reference(obj))]

    app.add_directive("crew-reference", CrewReferenceDirective)
    app.connect("autodoc-process-docstring", process_docstring)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
