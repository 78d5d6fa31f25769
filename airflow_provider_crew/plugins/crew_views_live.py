"""How the Crew tab follows a running execution (docs/crew-views.md, "While the task runs"): the
connection and poll pace of the task instance, and the status reads from its crew service, shared by
every viewer of the execution in this api-server process.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_crew.plugins import airflow_db
from airflow_provider_crew.waiting.rules import grown_interval

if TYPE_CHECKING:
    from airflow_provider_crew.status import CrewStatus
    from airflow_provider_crew.waiting.budget import Prices

log = logging.getLogger(__name__)

#: The tab never reads a service more often than this, whatever the wait's pace.
MIN_REFRESH_SECONDS = 2.0
#: How long one status read from the api-server may take, connecting included; no retry.
SERVICE_READ_SECONDS = 5.0
# Executions (and task versions) remembered before the memory is cleared (an api-server runs for weeks).
_MAX_REMEMBERED = 10_000
_SETTING_NAMES = ("crew_conn_id", "poll_interval", "max_poll_interval")
# Why a service could not be reached, by words its transport error holds (lower case), as a person
# reads it; the error's own text runs urllib3's and aiohttp's reprs together.
_UNREACHABLE = (
    (("refused",), "the connection was refused"),
    (("timed out", "timeout", "no complete answer"), "it did not answer in time"),
    (("name or service", "nodename", "name resolution", "getaddrinfo"), "its host name does not resolve"),
    (("ssl", "certificate", "tls"), "the TLS handshake failed"),
)


# -- the connection and pace a task instance follows its execution with ------------------------------


@dataclass(frozen=True)
class Following:
    """How the tab follows one task instance's execution."""

    conn_id: str | None  # None: a mapped task whose connection is expanded at run time, not deferred
    pace: float  # seconds between reads
    kickoff_id: str | None  # a deferred wait's execution


# The crew settings of each task of a DAG version, read once per api-server process (a version never
# changes, and a big DAG's deserialization is not free): (fields, the mapped task's expand input).
_VERSIONS: dict[Any, dict[str, tuple[dict[str, Any], Any]]] = {}


def _version_tasks(session: Any, dag_version_id: Any) -> dict[str, tuple[dict[str, Any], Any]]:
    if dag_version_id in _VERSIONS:
        return _VERSIONS[dag_version_id]
    dag = airflow_db.serialized_dag(session, dag_version_id)
    if dag is None:
        return {}
    tasks = {}
    for task in dag.task_dict.values():  # Airflow's own deserialization
        partial = getattr(task, "partial_kwargs", None)  # a mapped task's, with its expand input
        if isinstance(partial, dict):
            fields = {name: partial[name] for name in _SETTING_NAMES if name in partial}
            tasks[task.task_id] = (fields, getattr(task, "expand_input", None))
        else:
            tasks[task.task_id] = ({name: getattr(task, name, None) for name in _SETTING_NAMES}, None)
    if len(_VERSIONS) > _MAX_REMEMBERED:
        _VERSIONS.clear()
    _VERSIONS[dag_version_id] = tasks
    return tasks


def expanded_value(expand_input: Any, name: str, map_index: int) -> tuple[bool, Any]:
    """(whether ``name`` may be mapped, its value at ``map_index`` when the DAG gives it literally).

    Airflow's order for ``expand`` over several lists: the last argument varies fastest. A value from
    an XCom is known only at run time: (True, None).
    """
    value = getattr(expand_input, "value", None)
    if expand_input is None or (isinstance(value, dict) and name not in value):
        return False, None
    if isinstance(value, list) and all(isinstance(each, dict) for each in value):  # expand_kwargs
        item = value[map_index] if 0 <= map_index < len(value) else {}
        return any(name in each for each in value), item.get(name)
    if not isinstance(value, dict) or not all(
        isinstance(each, (list, tuple, dict)) and each for each in value.values()
    ):
        return True, None  # expand or expand_kwargs over an XCom
    index = map_index
    for key in reversed(list(value)):
        if key == name:
            values = value[key]
            return True, values[index % len(values)] if isinstance(values, (list, tuple)) else None
        index //= len(value[key])
    return True, None


def following(session: Any, ti: Any) -> Following:
    """The connection, the wait's poll interval now (seconds) and a deferred wait's kickoff id."""
    fields, expand_input = _version_tasks(session, ti.dag_version_id).get(ti.task_id, ({}, None))
    mapped, value = expanded_value(expand_input, "crew_conn_id", ti.map_index)
    conn_id = fields.get("crew_conn_id") or (value if mapped else "crew_default")
    first = _number(fields.get("poll_interval")) or MIN_REFRESH_SECONDS
    longest = _number(fields.get("max_poll_interval")) or first
    kickoff_id = None
    if ti.trigger_id is not None:
        trigger = airflow_db.trigger_row(session, ti.trigger_id)
        kwargs = trigger.kwargs if trigger is not None and "CrewStatusTrigger" in trigger.classpath else {}
        conn_id = kwargs.get("crew_conn_id") or conn_id
        first = _number(kwargs.get("poll_interval")) or first
        longest = _number(kwargs.get("max_poll_interval")) or longest
        kickoff_id = kwargs.get("kickoff_id") or None
    started = ti.start_date.timestamp() if ti.start_date else time.time()
    pace = max(MIN_REFRESH_SECONDS, wait_pace(first, longest, time.time() - started))
    return Following(conn_id if isinstance(conn_id, str) and conn_id else None, pace, kickoff_id)


def _number(value: Any) -> float | None:
    if hasattr(value, "total_seconds"):
        value = value.total_seconds()
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def wait_pace(first: float, longest: float, elapsed: float) -> float:
    """The interval a wait polls at after ``elapsed`` seconds: it starts at ``first`` and grows as the
    wait's does (without its jitter) up to ``longest``."""
    interval, spent = first, 0.0
    while spent + interval < elapsed and interval < longest:
        spent += interval
        interval = grown_interval(interval, longest)
    return interval


# -- the reads -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """Why the service could not be read, and since when (epoch seconds) it cannot."""

    service: str  # the connection, and its address when the api-server could read it
    why: str
    since: float


@dataclass(frozen=True)
class Known:
    """What one execution's reads left: the newest status and when it was read (epoch seconds)."""

    status: CrewStatus | None = None
    status_at: float | None = None
    problem: Problem | None = None
    checked: float = 0.0  # when the service was last asked (monotonic)
    prices: Prices | None = None  # the connection's, which price the usage (None: it has none)


class LiveStatuses:
    """The last status read per (connection, execution); a read at most every ``min_age`` seconds."""

    def __init__(self, min_age: float = MIN_REFRESH_SECONDS) -> None:
        self.min_age = min_age
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], Known] = {}
        self._reading: dict[tuple[str, str], threading.Lock] = {}

    def read(self, conn_id: str, kickoff_id: str) -> Known:
        """The newest status known of the execution, read from its service now if it is due."""
        key = (conn_id, kickoff_id)
        with self._lock:
            reading = self._reading.setdefault(key, threading.Lock())
        with reading:  # one read per execution at a time: who waits here takes its answer below
            with self._lock:
                known = self._last.get(key, Known())
            if time.monotonic() - known.checked >= self.min_age:
                known = self._read(conn_id, kickoff_id, known)
                with self._lock:
                    if len(self._last) > _MAX_REMEMBERED:
                        self._last.clear()
                        self._reading.clear()
                    self._last[key] = known
        return known

    @staticmethod
    def _read(conn_id: str, kickoff_id: str, last: Known) -> Known:
        from airflow_provider_crew.hooks.crew import CrewHook
        from airflow_provider_crew.waiting.budget import prices_of

        service = f"connection {conn_id!r}"
        try:
            hook = CrewHook(crew_conn_id=conn_id, retry_limit=0)
            service = f"{service} ({hook.config.base_url})"
            status = hook.get_status(kickoff_id, deadline=time.time() + SERVICE_READ_SECONDS)
            return Known(status, time.time(), None, time.monotonic(), prices_of(hook.config))
        except Exception as error:
            since = last.problem.since if last.problem is not None else time.time()
            problem = Problem(service, why_unreadable(error, conn_id), since)
            return Known(last.status, last.status_at, problem, time.monotonic(), last.prices)


def why_unreadable(error: Exception, conn_id: str) -> str:
    """Why a status read failed, in a few words a person reads; never a secret (nor a token in a URL)."""
    from airflow_provider_crew.exceptions import CrewConfigurationError, CrewError, CrewHTTPError

    if isinstance(error, CrewHTTPError):
        meaning = {401: ": it refused the connection's token", 404: ": it does not know this execution"}
        return f"it answered HTTP {error.http_status}{meaning.get(error.http_status, '')}"
    if isinstance(error, CrewConfigurationError):  # written to name the field and the fix, no secret
        text = re.sub(r"//[^/@\s]*@", "//", str(error)).removeprefix(f"Connection {conn_id!r}: ")
        return f"the api-server cannot use the connection: {text}"
    if isinstance(error, CrewError):
        text = str(error).lower()
        return next(
            (why for words, why in _UNREACHABLE if any(w in text for w in words)), "it is unreachable"
        )
    log.warning("The Crew tab could not read %s's status.", conn_id, exc_info=True)
    return f"an unexpected {type(error).__name__} (the api-server's log has it)"


def _when(epoch: float) -> str:
    moment, day = time.gmtime(epoch), "%Y-%m-%d"
    same_day = time.strftime(day, moment) == time.strftime(day, time.gmtime())
    return time.strftime("%H:%M:%S UTC" if same_day else f"{day} %H:%M:%S UTC", moment)


def banner(known: Known, stored_status: bool) -> str | None:
    """The tab's one message when the service cannot be read: which, why, since when, what is shown."""
    problem = known.problem
    if problem is None:
        return None
    if known.status_at is not None:
        shown = f"Shown: the state it gave at {_when(known.status_at)}."
    elif stored_status:
        shown = "Shown: the state the task stored."
    else:
        shown = "No state is known yet."
    why, since = problem.why.rstrip("."), _when(problem.since)
    return f"The crew service of {problem.service} cannot be read since {since}: {why}. {shown}"


LIVE = LiveStatuses()
