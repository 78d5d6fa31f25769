"""The api-server's stop for a deferred crew wait that a user ends while no triggerer runs its trigger.

A user who marks a deferred task failed or success ends its wait from the api-server. The triggerer
that runs the task's trigger deletes the trigger and cancels it (3.0-3.2) or calls its ``on_kill``
(3.3+), and the trigger stops the execution (:meth:`CrewStatusTrigger.stop_if_abandoned`). While no
triggerer runs it, the trigger is deleted unseen and the crew runs on: for the moment after every
deferral until a triggerer takes the trigger up, while every triggerer is down, while a triggerer
holds a trigger it has not started (a triggerer's first loop builds its execution API: 10-24 s here),
and when the triggerer that held it died.

When a user sets a task instance's state through the REST API or the UI, Airflow calls its listeners'
``on_task_instance_failed`` / ``on_task_instance_success`` in the api-server, with
``previous_state=None`` (3.0+, apache/airflow#48941), inside the request, before it commits. The task
instance still names its trigger then, and the trigger's row is there (a triggerer deletes it in its
loop, after the commit): this listener reads it and, for a crew wait with ``stop_crew``, stops the
execution by the trigger's rules (:func:`~airflow_provider_crew.hooks.stop.stop` with ``unless_reached``:
a crew that reached what the wait waits for is not stopped).

- No triggerer holds the trigger: the stop starts as soon as the request has committed the state.
- A triggerer holds it: its trigger stops the execution. The listener looks again
  :data:`BACKSTOP_SECONDS` later, past the trigger's own stop, and stops an execution still short of
  its end (its triggerer had not started the trigger, or died). Whether a triggerer is alive is not
  asked: its heartbeat lags while it works (a fresh triggerer's first loop skipped it for 13 s here),
  and a triggerer taken for dead too soon still stops its trigger. A stopped crew is finished, so
  whichever comes second sends nothing: one stop.
- Either way only while the task instance keeps the state and try the user set (a clear or a new try
  in between may have a reader again), in a few background threads, each read and stop bounded by the
  trigger's :data:`~airflow_provider_crew.triggers.crew.STOP_SECONDS`: the user's request never waits
  for the crew service, and a request that fails to commit stops nothing. The stop's line goes to the
  api-server's log. A look-again still pending when the api-server process stops is not made.
- With the webhook wake on, a trigger stops nothing when it is cancelled (a wake looks like a user's
  action to it); a wake calls no listener, so a mark the listener sees is a user's: it stops at once,
  whether a triggerer holds the trigger or not.
- A clear calls no listener: it stays a trigger's to see (and, with the wake on, nobody's).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from airflow.listeners import hookimpl

from airflow_provider_crew.plugins import airflow_db
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.rules import WaitFor

log = logging.getLogger(__name__)

#: Seconds after a user's end of a task whose trigger a triggerer holds before the listener looks
#: again: past the trigger's own stop (a triggerer's loop, which stalled for up to 24 s here, then the
#: trigger's state query, status read and stop, 12 s each at most).
BACKSTOP_SECONDS = 60.0
# Threads that stop executions; each stop takes up to twice STOP_SECONDS against a dead service.
STOPPERS = 4


@dataclass(frozen=True)
class AbandonedWait:
    """A crew wait whose task a user ended: what to stop, why, and the task instance as the user left it."""

    kickoff_id: str
    crew_conn_id: str
    wait_for: WaitFor
    reason: str
    #: A triggerer holds the trigger: the trigger stops it; the listener looks again later.
    held: bool
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int


def abandoned_wait(task_instance: Any, session: Any) -> AbandonedWait | None:
    """The crew wait ``task_instance`` deferred to, when a user just ended it; None when there is none,
    or nothing to stop (``stop_crew`` off, past its deadline, a state that keeps a reader).

    :param task_instance: Airflow's ORM task instance, its new state set.
    :param session: The session it was set in (the trigger is read in the same transaction, without
        flushing the user's change).
    """
    trigger_id = getattr(task_instance, "trigger_id", None)
    if trigger_id is None:
        return None
    from airflow_provider_crew.triggers.crew import CrewStatusTrigger

    # Read without autoflush: a flush here would send the user's new state to the database now and hold
    # its row lock for the rest of the request; the request's own commit flushes it, as without us.
    with session.no_autoflush:
        trigger = airflow_db.trigger_row(session, trigger_id)
    classpath = f"{CrewStatusTrigger.__module__}.{CrewStatusTrigger.__qualname__}"
    if trigger is None or trigger.classpath != classpath:
        return None
    wait = CrewStatusTrigger.from_kwargs(trigger.kwargs)
    reason = stopping.reason_for_state(task_instance.state, deferred=True)
    if not wait.may_stop() or reason is None:
        return None
    return AbandonedWait(
        wait.kickoff_id,
        wait.crew_conn_id,
        WaitFor(wait.wait_for),
        reason,
        # With the webhook wake on, the trigger stops nothing: the listener stops at once.
        held=trigger.triggerer_id is not None and not wait.woken_by_webhook,
        dag_id=task_instance.dag_id,
        run_id=task_instance.run_id,
        task_id=task_instance.task_id,
        map_index=task_instance.map_index,
        try_number=task_instance.try_number,
    )


def still_as_set(wait: AbandonedWait) -> bool:
    """Whether the task instance keeps the state (told by its stop reason) and the try the user left."""
    now = airflow_db.task_instance_now(wait.dag_id, wait.run_id, wait.task_id, wait.map_index)
    if now is None or now[1] != wait.try_number:
        return False
    return stopping.reason_for_state(now[0], deferred=True) == wait.reason


def stop_abandoned(wait: AbandonedWait) -> None:
    """Stop ``wait``'s execution unless its task instance changed since, or its crew reached what the
    wait waits for (or was stopped already, by its trigger); never raises."""
    from airflow_provider_crew.hooks.crew import CrewHook
    from airflow_provider_crew.hooks.stop import stop
    from airflow_provider_crew.triggers.crew import STOP_SECONDS

    try:
        if not still_as_set(wait):
            log.info(
                "Not stopping crew execution %s (%s): its task instance changed since.",
                wait.kickoff_id,
                wait.reason,
            )
            return
        if wait.held:  # its trigger stopped it, unless its triggerer had not started the trigger
            log.info(
                "Checking that crew execution %s stopped (%s, its trigger held).",
                wait.kickoff_id,
                wait.reason,
            )
        hook = CrewHook(wait.crew_conn_id)
        owner = {"dag_id": wait.dag_id, "task_id": wait.task_id}
        stop(
            hook,
            wait.kickoff_id,
            wait.reason,
            log,
            patience=STOP_SECONDS,
            owner=owner,
            unless_reached=wait.wait_for,
        )
    except Exception:
        log.warning("Could not stop crew execution %s (%s).", wait.kickoff_id, wait.reason, exc_info=True)


class Stopper:
    """Stops waits in a few daemon threads: at once, or :data:`BACKSTOP_SECONDS` later (one queue in
    order: every delay is the same). Started on first use."""

    def __init__(self) -> None:
        self._now: queue.SimpleQueue[AbandonedWait] = queue.SimpleQueue()
        self._later: queue.SimpleQueue[tuple[float, AbandonedWait]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False

    def submit(self, wait: AbandonedWait) -> None:
        self._start()
        if wait.held:
            self._later.put((time.monotonic() + BACKSTOP_SECONDS, wait))
        else:
            self._now.put(wait)

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            threading.Thread(target=self._hold, name="crew-stop-later", daemon=True).start()
            for number in range(STOPPERS):
                threading.Thread(target=self._stop, name=f"crew-stop-{number}", daemon=True).start()

    def _hold(self) -> None:
        while True:
            due, wait = self._later.get()
            time.sleep(max(0.0, due - time.monotonic()))
            self._now.put(wait)

    def _stop(self) -> None:
        while True:
            stop_abandoned(self._now.get())


STOPPER = Stopper()


def _stop_after_commit(session: Any, wait: AbandonedWait) -> None:
    from sqlalchemy import event

    event.listen(session, "after_commit", lambda _session: STOPPER.submit(wait), once=True)


def _on_state_set(previous_state: Any, task_instance: Any) -> None:
    if previous_state is not None:
        return  # Airflow's own end of a running task (its worker's failure): not a user's mark
    try:
        from sqlalchemy.orm import object_session

        session = object_session(task_instance)
        wait = abandoned_wait(task_instance, session) if session is not None else None
        if wait is not None:
            _stop_after_commit(session, wait)
    except Exception:  # a listener must never fail the user's request
        log.warning("Could not check %s for a crew wait to stop.", task_instance, exc_info=True)


class StopListener:
    """Airflow's listener (the plugin registers it in the api-server only)."""

    @hookimpl
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
        _on_state_set(previous_state, task_instance)

    @hookimpl
    def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
        _on_state_set(previous_state, task_instance)
