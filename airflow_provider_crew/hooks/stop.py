"""The one stop of an execution nobody waits for: synchronous, called by the task (its time-out, its
kill, its budget), the managed agent, the api-server's listener (in its threads) and the trigger (in a
thread, as it asks its task's state). When and why to stop, and what each answer is said as:
:mod:`airflow_provider_crew.waiting.stopping`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_crew.exceptions import CrewError
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.rules import WaitFor, outcome_of

if TYPE_CHECKING:
    from airflow_provider_crew.hooks.crew import CrewHook
    from airflow_provider_crew.models import StopResult


def stop(
    hook: CrewHook,
    kickoff_id: str,
    reason: str,
    log: Any,
    *,
    patience: float,
    owner: Mapping[str, str],
    unless_reached: WaitFor | None = None,
) -> StopResult | None:
    """``POST /stop/{kickoff_id}`` unless the connection turned stopping off or its service has none,
    and one log line either way.

    :param hook: The ``CrewHook`` of the execution's connection.
    :param reason: Why, in the log line's words (:data:`~.stopping.WAIT_TIMEOUT`, ...).
    :param log: Where the line goes.
    :param patience: Seconds the status read (with ``unless_reached``) and then the stop may take.
    :param owner: The ``dag_id`` and ``task_id`` tags of the task that owned the execution, for
        ``crew.execution.left_running`` when it may run on.
    :param unless_reached: For a deferred wait something outside its trigger ended: read the status
        first, and leave an execution that reached what the wait waits for (a webhook's wake ends the
        deferral from outside too, and its woken task reads the execution). An unknown status stops
        nothing (a line says so).
    :return: The service's answer; None when nothing was sent (a line says why, except when the crew
        reached its end: its task reads it).
    """
    if unless_reached is not None:
        try:
            status = hook.get_status(kickoff_id, deadline=time.time() + patience)
        except CrewError as error:
            log.info("Not stopping crew execution %s: its status is unknown (%s).", kickoff_id, error)
            return None
        if outcome_of(status, unless_reached) is not None:
            return None
    config = hook.config
    if stopping.not_stopping(config, kickoff_id, reason, log, owner):
        return None
    result = hook.stop(kickoff_id, patience=patience)
    stopping.stop_said(config, kickoff_id, reason, result, log, owner)
    return result


__all__ = ["stop"]
