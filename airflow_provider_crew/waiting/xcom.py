"""What the end of a wait pushes to XCom, and the log line that says so, without I/O.

The worker pushes these keys one by one; a trigger that ends its task itself pushes the same keys and
values (:mod:`airflow_provider_crew.triggers.crew`). A key a wait's end may leave out reads as None
downstream, whether pulled (``xcom_pull``) or taken as an XComArg (:func:`crew_output`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from airflow_provider_crew.status import CrewState, CrewStatus
from airflow_provider_crew.waiting.budget import Prices, priced
from airflow_provider_crew.waiting.rules import Outcome, WaitResult

# XCom keys, named once: DAG authors pull them by these names.
XCOM_KICKOFF_ID = "kickoff_id"
XCOM_KICKED_OFF_AT = "kicked_off_at"
XCOM_WEBHOOKS = "webhooks"
XCOM_RESUME = "resume"
# The execution's page, pushed as soon as a task knows it; the "Crew execution" link reads it.
XCOM_EXECUTION_URL = "execution_url"
# What the review's tasks push: a round its request, the result task every round's record.
XCOM_REVIEW_REQUEST = "review_request"
XCOM_REVIEW_HISTORY = "review_history"
# What a wait's end pushes (a trigger that ends the task pushes the same).
XCOM_RESULT = "result"
XCOM_STATUS = "status"
XCOM_HUMAN_INPUT = "human_input"
XCOM_USAGE = "usage"
#: The keys a wait's end pushes only in some ends: absent, they read as None, also as XComArgs.
NONE_WHEN_ABSENT = frozenset({XCOM_RESULT, XCOM_STATUS, XCOM_HUMAN_INPUT, XCOM_USAGE})
OUTPUT_LOG_LIMIT = 2000


def kicked_off_at_record(kickoff_id: str, epoch_seconds: float) -> dict[str, Any]:
    """The XCom ``kicked_off_at`` value. The id is in it so that a wait pulling from a mapped
    kickoff (a list of these) finds its own execution's."""
    return {"kickoff_id": kickoff_id, "epoch_seconds": epoch_seconds}


def epoch_seconds(record: Any) -> float | None:
    """A record's ``epoch_seconds`` (XCom ``kicked_off_at``, a kickoff's retry record), or None."""
    value = record.get("epoch_seconds") if isinstance(record, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def shorten(value: Any, limit: int = OUTPUT_LOG_LIMIT, *, rest: str = "more characters") -> str:
    """``value`` as text for a log line, cut after ``limit`` characters with a note of how many more."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} {rest})"


def paused_task(status: CrewStatus, kickoff_id: str) -> dict[str, Any]:
    """What a reviewer needs to resume: the XCom value handed downstream on a pause."""
    return {
        "execution_id": kickoff_id,
        "task_id": status.paused_task_id,
        "task_output": status.paused_task_output,
    }


def record_without_output(status: CrewStatus) -> dict[str, Any]:
    """``status.raw`` less the copies of the final output, which XCom ``result`` holds once: at a
    SUCCEEDED end, no ``result`` or ``result_json``, and no ``last_executed_task.output`` when that
    is the output (read from there, or a copy). Any other record is whole (a pause's output stays)."""
    record = dict(status.raw)
    if status.state is not CrewState.SUCCEEDED:
        return record
    result = record.pop("result", None)
    copies = [status.output, record.pop("result_json", None), result]
    copies += [result.get("output")] if isinstance(result, Mapping) else []
    last_task = record.get("last_executed_task")
    last_output = last_task.get("output") if isinstance(last_task, Mapping) else None
    if isinstance(last_task, Mapping) and last_output not in (None, "") and last_output in copies:
        record["last_executed_task"] = {k: v for k, v in last_task.items() if k != "output"}
    return record


def record_without_paused_output(status: CrewStatus) -> dict[str, Any]:
    """``status.raw`` less the copies of the paused task's output, which XCom ``human_input`` holds once:
    ``last_executed_task.output`` and the ``task_output`` or ``output`` of ``pending_human_input`` or
    ``human_input``, where they are that output."""
    record, output = dict(status.raw), status.paused_task_output
    if output is None:
        return record
    for key in ("last_executed_task", "pending_human_input", "human_input"):
        part = record.get(key)
        if isinstance(part, Mapping):
            record[key] = {
                k: v for k, v in part.items() if not (k in ("output", "task_output") and v == output)
            }
    return record


def result_xcoms(kickoff_id: str, result: WaitResult, prices: Prices | None = None) -> dict[str, Any]:
    """What a wait that ended finished or paused pushes to XCom, by key.

    ``status`` (the last record, less the outputs another key holds: :func:`record_without_output`,
    :func:`record_without_paused_output`), then ``human_input`` at a pause (the paused task's
    output, stored once), or ``usage`` (when the service reported it) and ``result`` (the final output,
    stored once) at the end. The worker pushes them one by one; a trigger that ends the task
    itself pushes them too: the same keys and values either way. ``usage`` has its ``cost`` from
    ``prices``, the connection's (None without them). An end ``over_budget`` pushes them as an end does.

    A key not named here is not pushed, not pushed as None: Airflow reads a None XCom as a missing one
    anyway (an XComArg of it still raises ``XComNotFound``), and Airflow 3.0 refuses to store one (422).
    :func:`crew_output` is what makes a missing key read as None.
    """
    status = result.last_status
    xcoms: dict[str, Any] = {}
    if result.outcome is Outcome.PAUSED and status is not None:
        xcoms[XCOM_STATUS] = record_without_paused_output(status)
        xcoms[XCOM_HUMAN_INPUT] = paused_task(status, kickoff_id)
        return xcoms
    if status is not None:
        xcoms[XCOM_STATUS] = record_without_output(status)
    if status is not None and status.usage is not None:
        # The shape of common.ai's ``usage`` XCom, so cost dashboards built for it read crews too.
        xcoms[XCOM_USAGE] = priced(status.usage, prices)
    if status is not None and status.output is not None:  # a crew may finish without output
        xcoms[XCOM_RESULT] = status.output
    return xcoms


def asset_event_extra(
    kickoff_id: str, result: WaitResult | None, execution_url: str | None, prices: Prices | None = None
) -> dict[str, Any]:
    """What a crew task's asset events carry in ``extra``: the execution that produced them.

    ``kickoff_id``; ``state``, how the task's wait ended (``succeeded``, or ``paused`` with
    ``on_human_input="return"``; ``running`` when the task did not wait); ``execution_url`` when the
    connection has an execution page; ``usage`` as XCom ``usage`` has it, when the service reported it.
    """
    state = result.outcome.value if result is not None else "running"
    extra: dict[str, Any] = {"kickoff_id": kickoff_id, "state": state}
    if execution_url:
        extra["execution_url"] = execution_url
    usage = result_xcoms(kickoff_id, result, prices).get(XCOM_USAGE) if result is not None else None
    if usage is not None:
        extra[XCOM_USAGE] = usage
    return extra


def end_log_line(kickoff_id: str, result: WaitResult) -> str:
    """The task log's line for a wait that ended finished or paused, with the output under review."""
    status = result.last_status
    if result.outcome is Outcome.PAUSED and status is not None:
        return (
            f"Crew execution {kickoff_id} is waiting for human input on task {status.paused_task_id!r}. "
            f"Its output:\n{shorten(status.paused_task_output, rest='more characters in XCom')}"
        )
    output = shorten(status.output if status is not None else None, rest="more characters in XCom")
    return f"Crew execution {kickoff_id} succeeded. Output:\n{output}"


def crew_output(operator: Any, key: str = "return_value") -> Any:
    """``operator.output`` for a crew task: an XComArg whose keys in :data:`NONE_WHEN_ABSENT` resolve
    to None when the task did not push them, as ``ti.xcom_pull`` gives None.

    Airflow's own XComArg raises ``XComNotFound`` for a missing key other than ``return_value``, so a
    TaskFlow task taking ``kickoff.output["result"]`` would fail when the kickoff ended at a pause
    (and one taking ``["human_input"]`` when it ended finished). Any other missing key still raises:
    a misspelt key fails. Of a mapped task, such a key resolves to a list whose position *i* is map
    index *i* (:func:`by_map_index`). Serialised, it is Airflow's plain XComArg (the scheduler reads it
    as one, so ``.expand()`` over it maps over the values pushed).
    """
    return _crew_xcom_arg_class()(operator=operator, key=key)


@functools.cache
def _crew_xcom_arg_class() -> type:
    """The XComArg class, built on first use: DAG files that never read ``.output`` import no more."""
    from airflow_provider_crew._compat import PlainXComArg, xcom_not_found

    XComNotFound = xcom_not_found()

    class CrewXComArg(PlainXComArg):  # type: ignore[misc, valid-type]
        """A crew task's output: a missing key of :data:`NONE_WHEN_ABSENT` resolves to None."""

        def __getitem__(self, item: str) -> Any:
            super().__getitem__(item)  # Airflow's check of the key
            return type(self)(operator=self.operator, key=item)

        def resolve(self, context: Any) -> Any:
            if self.key in NONE_WHEN_ABSENT and self.operator.is_mapped:
                return by_map_index(self.operator, self.key, context["ti"])
            try:
                return super().resolve(context)
            except XComNotFound:
                if self.key in NONE_WHEN_ABSENT:
                    return None
                raise

    CrewXComArg.__module__, CrewXComArg.__qualname__ = __name__, "CrewXComArg"
    return CrewXComArg


def crew_partial(partial: Any) -> Any:
    """A crew task's ``partial()``, whose ``expand``/``expand_kwargs`` give a mapped task whose
    ``.output`` is :func:`crew_output`'s, so that its keys pair with map indexes as ``@task.crew``'s do.

    Airflow's ``MappedOperator.output`` is its plain XComArg, whatever the operator. The two classes
    below add nothing but that (no state: a mapped task serialises, and is read back, as Airflow's
    own). ``OperatorPartial._expand`` builds the mapped task for both ``expand`` and ``expand_kwargs``
    on every Airflow 3 minor.
    """
    partial.__class__ = _crew_mapping_classes()
    return partial


@functools.cache
def _crew_mapping_classes() -> type:
    from airflow.providers.common.compat.sdk import MappedOperator

    from airflow_provider_crew._compat import OperatorPartial

    class CrewMappedOperator(MappedOperator):  # type: ignore[misc]
        __slots__ = ()

        @property
        def output(self) -> Any:
            return crew_output(self)

    class CrewOperatorPartial(OperatorPartial):  # type: ignore[misc]
        __slots__ = ()

        def _expand(self, *args: Any, **kwargs: Any) -> Any:
            mapped = super()._expand(*args, **kwargs)
            mapped.__class__ = CrewMappedOperator
            return mapped

    return CrewOperatorPartial


def by_map_index(task: Any, key: str, ti: Any) -> list[Any]:
    """``key`` of every instance of the mapped ``task`` in ``ti``'s run: position *i* is map index *i*,
    None where that instance pushed nothing (it ended at a pause, or did not wait).

    Airflow's own resolution lists only the values pushed, so one paused instance moved every later
    output a place up, and a ``zip`` with the inputs paired them wrongly without a word. One read per
    instance (Airflow has no read of a key by map index in one request).
    """
    count = ti.get_ti_count(dag_id=task.dag_id, task_ids=[task.task_id], run_ids=[ti.run_id])
    return [ti.xcom_pull(task_ids=task.task_id, key=key, map_indexes=index) for index in range(count)]
