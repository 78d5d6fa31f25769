"""The event stream's receiver in the api-server: ``POST /crew-webhooks/v1/events/{dag_id}/{run_id}/
{task_id}/{map_index}``, where a kickoff or resume that subscribed asks the crew service to post its events.

A delivery is accepted only with the run's events token as its bearer token (anything else: 401, and
nothing more is said or touched); its body is bounded (:data:`~.webhook_app.MAX_BODY_BYTES`, and
:data:`~airflow_provider_crew.crew_events.MAX_EVENTS_PER_DELIVERY` events). Its events are added to
the task instance's :class:`~airflow_provider_crew.crew_events.EventLog`, kept as its XCom
``crew_events`` in Airflow's database, so that every api-server process (and the Crew tab any of them
serves) reads the same, and Airflow deletes it with the DAG run.

Then the waits on that execution are woken when the events say the crew ended (a failure is
announced by no webhook) or spent past a wait's budget: as after any wake, the woken task reads the
status with the crew's token, so a forged event never ends a wait by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from airflow_provider_crew import metrics
from airflow_provider_crew.crew_events import (
    ENDING_EVENTS,
    XCOM_CREW_EVENTS,
    CrewEvent,
    EventLog,
    parse_delivery,
)
from airflow_provider_crew.hooks.webhook_receiver import (
    CONTENT_PARAMETER,
    EVENTS_TOKEN_KEY_PURPOSE,
    bearer_token,
    token_matches,
)
from airflow_provider_crew.plugins import airflow_db
from airflow_provider_crew.waiting.budget import Budget

log = logging.getLogger(__name__)

# One process adds to a task instance's events at a time; across processes, the row lock does
# (PostgreSQL, MySQL). SQLite serialises its writers itself.
_storing = threading.Lock()


def task_of(path: str) -> tuple[str, str, int] | None:
    """``(run_id, task_id, map_index)`` of the address's path after the DAG id (a run id may hold a
    ``/``; a task id and a map index do not), or None when it names none."""
    run_id, _, rest = path.rpartition("/")
    run_id, _, task_id = run_id.rpartition("/")
    try:
        map_index = int(rest)
    except ValueError:
        return None
    return (run_id, task_id, map_index) if run_id and task_id else None


def add_events(
    where: tuple[str, str, str, int], kickoff_id: str, events: list[CrewEvent], content: bool
) -> tuple[list[CrewEvent], EventLog] | None:
    """Add ``events`` of ``kickoff_id`` to the task instance's log (a new log for another execution, as
    after a retry); the events not seen before, and the log. None when the task instance is gone."""
    with _storing, airflow_db.session() as db:
        ti = airflow_db.lock_task_instance(db, *where)
        if ti is None:
            return None
        stored = airflow_db.task_xcoms(db, ti, (XCOM_CREW_EVENTS,)).get(XCOM_CREW_EVENTS)
        kept = airflow_db.xcom_value(stored) if stored is not None else None
        same = isinstance(kept, dict) and kept.get("kickoff_id") == kickoff_id
        event_log = EventLog.model_validate(kept) if same else EventLog(kickoff_id=kickoff_id)
        new = event_log.add(events, content=content)
        if new:
            airflow_db.set_task_xcom(db, ti, XCOM_CREW_EVENTS, event_log.model_dump(mode="json"))
    return new, event_log


def _over_budget(event_log: EventLog) -> Callable[[dict[str, Any]], bool]:
    """Whether a wait (its trigger's kwargs) has a budget the events' usage reached."""

    def over(kwargs: dict[str, Any]) -> bool:
        budget = Budget.from_kwargs(kwargs.get("budget"))
        return budget is not None and budget.over(event_log.usage)

    return over


class EventReceiver:
    """Deliveries of the event stream: checked, kept, and waking the waits they end."""

    def __init__(
        self, waker: Any, keys: Any, read_body: Callable[[Request], Awaitable[bytes | None]]
    ) -> None:
        """:param waker: The app's ``Waker``; :param keys: its ``ReceiverKeys`` (:mod:`.webhook_app`,
        which builds this receiver: typed loosely, so that this module does not import it back)."""
        self._waker, self._keys, self._read_body = waker, keys, read_body

    async def deliver(self, dag_id: str, path: str, request: Request) -> Response:
        where = task_of(path)
        config, _ = await self._keys.aget()
        token = bearer_token(request.headers.get("authorization", ""))
        if where is None or config is None or token is None:
            return self._refused("unauthorized")
        run_id, task_id, map_index = where
        if not token_matches(config.keys, dag_id, run_id, token, EVENTS_TOKEN_KEY_PURPOSE):
            return self._refused("unauthorized")
        body = await self._read_body(request)  # only now: an unauthenticated sender is read no further
        if body is None:
            return self._refused("too_large", 413, "Body too large.")
        try:
            events, skipped = parse_delivery(json.loads(body))
        except (ValueError, RecursionError) as error:
            status = 413 if "at most" in str(error) else 400
            return self._refused("too_large" if status == 413 else "malformed", status, str(error))
        content = request.query_params.get(CONTENT_PARAMETER) == "1"
        by_execution: dict[str, list[CrewEvent]] = defaultdict(list)
        for event in events:
            by_execution[event.execution_id].append(event)
        kept, waking = 0, 0
        for kickoff_id, its_events in by_execution.items():
            added = await asyncio.to_thread(
                add_events, (dag_id, run_id, task_id, map_index), kickoff_id, its_events, content
            )
            if added is None or not added[0]:
                continue
            new, event_log = added
            kept += len(new)
            waking += await self._wake(dag_id, run_id, kickoff_id, new, event_log)
        if kept:
            metrics.count("crew.events.received", kept, dag_id=dag_id)
        return JSONResponse({"accepted": kept, "skipped": skipped, "waking": waking}, status_code=202)

    async def _wake(
        self, dag_id: str, run_id: str, kickoff_id: str, new: list[CrewEvent], event_log: EventLog
    ) -> int:
        """Wake the waits on the execution that the new events end: its end, or a budget reached."""
        if any(event.type in ENDING_EVENTS for event in new):
            return await self._waker.webhook("events", dag_id, run_id, kickoff_id)
        if any(event.type == "llm_call_completed" for event in new):
            return await self._waker.webhook(
                "events", dag_id, run_id, kickoff_id, ends=_over_budget(event_log), lookup="usage"
            )
        return 0

    @staticmethod
    def _refused(reason: str, status: int = 401, detail: str = "Unauthorized") -> Response:
        metrics.count("crew.events.rejected", reason=reason)
        return JSONResponse({"detail": detail}, status_code=status)
