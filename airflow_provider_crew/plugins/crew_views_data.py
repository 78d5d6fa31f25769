"""What the Crew tab and the Crews page show (docs/crew-views.md), read from Airflow's metadata
database in the api-server.

The tab of a running task reads the service through :mod:`.crew_views_live`; everything else here is
synchronous database work, which the app (:mod:`.crew_views`) runs in threads.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from airflow_provider_crew.links.crew import web_address
from airflow_provider_crew.plugins import airflow_db
from airflow_provider_crew.plugins.crew_views_budget import (
    budget_line,
    over_budget_answer,
    unenforceable_line,
)
from airflow_provider_crew.plugins.crew_views_events import crew_activity, events_refresh
from airflow_provider_crew.plugins.crew_views_live import LIVE, banner, following
from airflow_provider_crew.status import CrewState, CrewStatus
from airflow_provider_crew.waiting.budget import CAP_PARAMETERS
from airflow_provider_crew.waiting.xcom import (
    XCOM_EXECUTION_URL,
    XCOM_HUMAN_INPUT,
    XCOM_KICKOFF_ID,
    XCOM_RESULT,
    XCOM_REVIEW_REQUEST,
    XCOM_STATUS,
    XCOM_USAGE,
)

#: The task types (``TaskInstance.operator``) of the provider's tasks, and the decorator's name.
CREW_OPERATORS = (
    "CrewKickoffOperator",
    "CrewStatusSensor",
    "CrewResumeOperator",
    "CrewReviewRoundOperator",
    "CrewReviewResultOperator",
    "_CrewDecoratedOperator",
)
CREW_DECORATOR = "@task.crew"
REVIEW_ROUND = "CrewReviewRoundOperator"
UNKNOWN_CONNECTION = (
    "The api-server cannot tell which crew service this task reads: its crew_conn_id is mapped from an "
    "XCom at run time. Shown: the state the task stored."
)
#: Characters of a finished execution's output the tab shows.
OUTPUT_HEAD_CHARS = 2000
LIVE_STATES = frozenset(
    {"running", "deferred", "awaiting_input", "up_for_reschedule", "queued", "scheduled", "restarting"}
)
#: A review round waits for its reviewer in these states (3.3 has one of its own).
AWAITING_REVIEWER = frozenset({"deferred", "awaiting_input"})
TAB_XCOM_KEYS = (
    "return_value",
    XCOM_KICKOFF_ID,
    XCOM_STATUS,
    XCOM_HUMAN_INPUT,
    XCOM_USAGE,
    XCOM_RESULT,
    XCOM_EXECUTION_URL,
)
PAGE_XCOM_KEYS = ("return_value", XCOM_KICKOFF_ID, XCOM_USAGE, XCOM_HUMAN_INPUT)
#: The Crews page's state of a task instance whose execution was stopped over its budget.
OVER_BUDGET_STATE = "over budget"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _word(state: Any) -> str | None:
    """A state column's value as its word (an enum's value, or the string)."""
    return str(getattr(state, "value", state)) if state else None


def _tokens(usage: Any) -> int | None:
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


def _cost(usage: Any) -> float | None:
    """A ``usage`` XCom's ``cost``, when it is a number (None without the connection's prices)."""
    cost = usage.get("cost") if isinstance(usage, dict) else None
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
        return float(cost)
    return None


# -- the Crew tab ---------------------------------------------------------------------------------


def _status_view(status: CrewStatus | None) -> dict[str, Any]:
    if status is None:
        return {"state": None}
    progress = status.progress
    output = status.output
    if output is not None and not isinstance(output, str):
        import json

        output = json.dumps(output, indent=1, default=str)
    return {
        "state": status.state.value,
        "state_word": status.raw_state or status.state.value,
        "message": status.message,
        "completed": progress.completed if progress else None,
        "total": progress.total if progress else None,
        "current_task": progress.current_task if progress else None,
        "current_agent": progress.current_agent if progress else None,
        "last_step": status.last_step,
        "tokens": _tokens(status.usage),
        "paused_task": status.paused_task_id,
        "paused_output": (status.paused_task_output or "")[:OUTPUT_HEAD_CHARS] or None,
        "error": status.error,
        "output_head": output[:OUTPUT_HEAD_CHARS] if isinstance(output, str) else None,
        "output_cut": isinstance(output, str) and len(output) > OUTPUT_HEAD_CHARS,
    }


def _review_request(session: Any, ti: Any, kickoff_id: str | None) -> dict[str, Any] | None:
    """The review round of this run that asks about this execution, for the tab's link."""
    rounds = airflow_db.run_xcoms(session, ti.dag_id, ti.run_id, XCOM_REVIEW_REQUEST, REVIEW_ROUND)
    for task_id, map_index, value in rounds:
        request = airflow_db.xcom_value(value)
        if isinstance(request, dict) and request.get("kickoff_id") == kickoff_id:
            return {"task_id": task_id, "map_index": map_index}
    return None


def task_view(dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any]:
    """What the Crew tab shows for one task instance (its latest try)."""
    with airflow_db.session() as session:
        ti = airflow_db.task_instance(session, dag_id, run_id, task_id, map_index)
        if ti is None:
            return {"found": False}
        # Its attempt, for a read after this session (3.4 keeps rendered fields per attempt).
        attempt = SimpleNamespace(
            id=ti.id, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index
        )
        xcoms = _task_xcoms(session, ti)
        state = _word(ti.state)
        is_crew = ti.operator in CREW_OPERATORS or ti.custom_operator_name == CREW_DECORATOR
        view: dict[str, Any] = {"found": True, "crew_task": is_crew, "ti_state": state}
        if not is_crew:
            return view
        kickoff_id = _text(xcoms.get(XCOM_KICKOFF_ID)) or _text(xcoms.get("return_value"))
        live = state in LIVE_STATES
        follow = following(session, ti) if live else None
        kickoff_id = kickoff_id or _text(follow and follow.kickoff_id)
        stopped_answer = over_budget_answer(xcoms.get(XCOM_STATUS))
        rendered = (
            airflow_db.rendered_fields(session, ti) if stopped_answer is not None or not kickoff_id else None
        )
        kickoff_id = kickoff_id or _text((rendered or {}).get("kickoff_id"))
        review = _review_request(session, ti, kickoff_id) if kickoff_id else None
        activity = crew_activity(session, dag_id, run_id, kickoff_id) if kickoff_id else None
    stored = XCOM_STATUS in xcoms and isinstance(xcoms[XCOM_STATUS], dict)
    status = CrewStatus.from_response(xcoms[XCOM_STATUS]) if stored else None
    source, problem, cost = "xcom", None, _cost(xcoms.get(XCOM_USAGE))
    if follow is not None and kickoff_id and follow.conn_id is None:
        problem = UNKNOWN_CONNECTION
    elif follow is not None and follow.conn_id and kickoff_id:
        known = LIVE.read(follow.conn_id, kickoff_id)
        problem = banner(known, stored)
        if known.status is not None:
            status, source = known.status, "service"
            cost = known.prices.cost(known.status.usage) if known.prices is not None else None
    shown = _shown(status, xcoms if source == "xcom" else {}, xcoms.get(XCOM_USAGE))
    shown["cost"] = cost if shown.get("tokens") is not None else None
    over_budget = _over_budget(shown, stopped_answer, rendered) if source == "xcom" else None
    if over_budget is None and status is not None and "usage_metrics" not in status.raw:
        if rendered is None:  # read only for a status without usage: its caps say whether that matters
            with airflow_db.session() as session:
                rendered = airflow_db.rendered_fields(session, attempt)
        caps = None if rendered is None else {name: rendered.get(name) for name in CAP_PARAMETERS}
        over_budget = unenforceable_line(status, caps)
    view.update(
        kickoff_id=kickoff_id,
        execution_url=web_address(xcoms.get(XCOM_EXECUTION_URL)),
        live=live,
        source=source,
        service_problem=problem,
        refresh_seconds=events_refresh(follow.pace, activity) if follow else None,
        review_task=review,
        over_budget=over_budget,
        activity=activity,
        **shown,
    )
    return view


def _over_budget(shown: dict[str, Any], answer: str | None, rendered: dict[str, Any] | None) -> str | None:
    """The tab's line for an execution its task stopped over its budget (None for another end), from
    what the task stored; the state shown becomes ``stopped`` when the stop says so."""
    if answer is None:
        return None
    caps = None if rendered is None else {name: rendered.get(name) for name in CAP_PARAMETERS}
    if answer == "stopped":  # the last state read came before the stop
        shown.update(state="stopped", state_word=None)
    return budget_line(answer, shown.get("tokens"), shown.get("cost"), caps)


def _task_xcoms(session: Any, ti: Any) -> dict[str, Any]:
    """The task instance's XComs the tab reads, by key."""
    stored = airflow_db.task_xcoms(session, ti, TAB_XCOM_KEYS)
    return {key: airflow_db.xcom_value(value) for key, value in stored.items()}


def _shown(status: CrewStatus | None, xcoms: dict[str, Any], usage: Any) -> dict[str, Any]:
    """The status as the tab shows it; from XCom, the output the record no longer holds and the pause."""
    output = xcoms.get(XCOM_RESULT)
    if status is not None and status.state is CrewState.SUCCEEDED and isinstance(output, (str, dict, list)):
        status = status.model_copy(update={"output": output})
    shown = _status_view(status)
    if shown.get("tokens") is None:
        shown["tokens"] = _tokens(usage)
    paused = xcoms.get(XCOM_HUMAN_INPUT)
    if isinstance(paused, dict) and shown.get("state") in (None, "waiting_for_human_input"):
        shown["state"] = "waiting_for_human_input"
        shown["paused_task"] = shown.get("paused_task") or _text(paused.get("task_id"))
        shown["paused_output"] = (_text(paused.get("task_output")) or "")[:OUTPUT_HEAD_CHARS] or None
    return shown


# -- the Crews page -------------------------------------------------------------------------------


def _window(since: datetime, dag_ids: set[str] | None) -> tuple[list[Any], dict[tuple, dict[str, Any]]]:
    """The crew task instances started since ``since`` (with their run's state), and their small XComs
    (3.4: of the attempt each task instance is at, :func:`.airflow_db.of_task_instance`)."""
    from sqlalchemy import or_, select, tuple_

    TI, XComModel = airflow_db.task_instance_model(), airflow_db.xcom_model()
    DagRun = airflow_db.dag_run_model()

    crew = or_(TI.operator.in_(CREW_OPERATORS), TI.custom_operator_name == CREW_DECORATOR)
    window = or_(TI.start_date >= since, TI.start_date.is_(None) & TI.state.in_(list(LIVE_STATES)))
    query = (
        select(*_columns(TI, "state", "start_date", "end_date", "operator"), DagRun.state.label("run_state"))
        .join(DagRun, (DagRun.dag_id == TI.dag_id) & (DagRun.run_id == TI.run_id))
        .where(crew, window)
    )
    # The crew tasks' XComs only: joined to their task instances, so that no other task's return_value
    # in the window is read (every DAG's, for a 90-day window).
    xcom_query = (
        select(*_columns(XComModel, "key", "value"))
        .join(TI, airflow_db.of_task_instance(XComModel, TI))
        .where(crew, XComModel.key.in_(PAGE_XCOM_KEYS), XComModel.timestamp >= since - timedelta(days=1))
    )
    if dag_ids is not None:
        query = query.where(TI.dag_id.in_(dag_ids))
        xcom_query = xcom_query.where(XComModel.dag_id.in_(dag_ids))
    with airflow_db.session() as session:
        tis = session.execute(query).all()
        xcoms: dict[tuple, dict[str, Any]] = defaultdict(dict)
        for dag_id, run_id, task_id, map_index, key, value in session.execute(xcom_query):
            xcoms[(dag_id, run_id, task_id, map_index)][key] = value
        failed = [tuple(ti[:4]) for ti in tis if _word(ti.state) == "failed"]
        for chunk in (failed[n : n + 200] for n in range(0, len(failed), 200)):
            # A failed task's status: was its execution stopped over its budget (it fails then)? Read by
            # the task instances' keys, joined to them for their attempt's: none when nothing failed.
            status = (
                select(*_columns(XComModel, "value"))
                .join(TI, airflow_db.of_task_instance(XComModel, TI))
                .where(XComModel.key == XCOM_STATUS, tuple_(*_columns(TI)).in_(chunk))
            )
            for dag_id, run_id, task_id, map_index, value in session.execute(status):
                xcoms[(dag_id, run_id, task_id, map_index)][XCOM_STATUS] = value
    return list(tis), xcoms


def _columns(table: Any, *more: str) -> list[Any]:
    """The columns that name a task instance (in the task instance and XCom tables alike), then
    ``more``."""
    return [getattr(table, name) for name in ("dag_id", "run_id", "task_id", "map_index", *more)]


def _row(ti: Any, held: dict[str, Any], state: str | None, start: Any, usage: Any, now: datetime) -> dict:
    """One line of the Crews page."""
    kickoff = held.get(XCOM_KICKOFF_ID, held.get("return_value"))
    if XCOM_STATUS in held and over_budget_answer(airflow_db.xcom_value(held[XCOM_STATUS])) is not None:
        state = OVER_BUDGET_STATE
    return {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "state": state,
        "kickoff_id": _text(airflow_db.xcom_value(kickoff)) if kickoff is not None else None,
        "start": start.isoformat() if start else None,
        "duration": round(((ti.end_date or now) - start).total_seconds(), 1) if start else None,
        "tokens": _tokens(usage),
        "cost": _cost(usage),
    }


def _days(since: datetime, until: datetime) -> list[str]:
    """The UTC days from ``since``'s to ``until``'s, both included, as ISO dates."""
    first, last = since.date(), until.date()
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def crews_view(days: int, dag_ids: set[str] | None, show: str, limit: int = 500) -> dict[str, Any]:
    """The crew task instances started in the last ``days`` days, in the DAGs the user may read.

    :param days: The window, counted back from now.
    :param dag_ids: The DAGs the user may read; None for all.
    :param show: ``all``, ``running`` or ``waiting`` (for a person).
    :param limit: The most rows listed (newest first); the counts and the plot cover the whole window.
    """
    since = datetime.now(timezone.utc) - timedelta(days=days)
    tis, xcoms = _window(since, dag_ids)
    now = datetime.now(timezone.utc)
    last_start_in_run = _last_start_in_run(tis)
    listed: list[tuple[Any, ...]] = []
    tokens_by_day: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    cost_by_day: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts = {"all": 0, "running": 0, "waiting": 0}
    for ti in tis:
        held = xcoms.get((ti.dag_id, ti.run_id, ti.task_id, ti.map_index), {})
        state, start, end = _word(ti.state), ti.start_date, ti.end_date
        usage = airflow_db.xcom_value(held[XCOM_USAGE]) if XCOM_USAGE in held else None
        tokens, cost = _tokens(usage), _cost(usage)
        paused_after = (
            XCOM_HUMAN_INPUT in held
            and _word(ti.run_state) == "running"
            and end is not None
            and last_start_in_run[(ti.dag_id, ti.run_id)] <= end
        )
        waiting = (ti.operator == REVIEW_ROUND and state in AWAITING_REVIEWER) or paused_after
        running = state in LIVE_STATES and not waiting
        counts["all"] += 1
        counts["running"] += running
        counts["waiting"] += waiting
        if moment := (end or start):
            day = moment.date().isoformat()
            if tokens:
                tokens_by_day[day][ti.dag_id] += tokens
            if cost is not None:  # from the usage XComs that have one (the crew connection's prices)
                cost_by_day[day][ti.dag_id] = round(cost_by_day[day][ti.dag_id] + cost, 6)
        if (show == "running" and not running) or (show == "waiting" and not waiting):
            continue
        listed.append((start, ti, held, "waiting for a person" if waiting else state, usage))
    # Newest first; only the rows shown are decoded and built.
    listed.sort(key=lambda entry: entry[0] or now, reverse=True)
    rows = [_row(ti, held, state, start, usage, now) for start, ti, held, state, usage in listed[:limit]]
    window = _days(since, now)  # every day of the window, without tokens too: the plot's axis
    return {
        "days": days,
        "show": show,
        "counts": counts,
        "rows": rows,
        "more": max(0, len(listed) - limit),
        "tokens_by_day": {day: dict(tokens_by_day.get(day, {})) for day in window},
        "cost_by_day": {day: dict(cost_by_day.get(day, {})) for day in window},
    }


def _last_start_in_run(tis: list[Any]) -> dict[tuple[str, str], datetime]:
    """When the latest crew task of each run started: a task that ended at a pause still waits for a
    person when nothing in its running run has started since."""
    last: dict[tuple[str, str], datetime] = {}
    for ti in tis:
        if ti.start_date is not None:
            key = (ti.dag_id, ti.run_id)
            last[key] = max(last.get(key, ti.start_date), ti.start_date)
    return last
