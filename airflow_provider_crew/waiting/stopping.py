"""Stopping an execution nobody waits for any more: when, why, and the one log line that says so. No I/O:
the stop itself is :func:`airflow_provider_crew.hooks.stop.stop`, which follows these rules.

A crew task that owns its execution's wait (the kickoff, a resume, the review's rounds; a sensor only
when asked with ``stop_crew=True``) stops the execution (``POST /stop/{kickoff_id}``) when something
other than the crew ends the task: Airflow's ``execution_timeout``, the wait's own ``timeout``, a user
who marks the task failed or success, or clears it. It never stops one that still has a reader: a
retry after a lost worker reattaches, a triggerer restart or a move to another triggerer re-creates
the wait, and a task that did not wait (``wait_for_completion=False``) never owned it.

What tells them apart is the task instance's state when its wait was cut off
(:func:`reason_for_state`): Airflow cancels a deferred task's trigger, or kills a running task's
process, for all of them alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_crew import metrics

if TYPE_CHECKING:  # the contract's models load where a request is sent, not with the DAG file's tasks
    from airflow_provider_crew.models import StopResult

# Why a wait was cut off, in the log line's words.
EXECUTION_TIMEOUT = "the task's execution_timeout passed"
WAIT_TIMEOUT = "the wait's timeout passed"
REVIEW_TIMEOUT = "nobody answered the review within response_timeout"
CLEARED = "the task was cleared"
AGENT_TIMEOUT = "the agent's call timed out"
MARKED = "the task was marked "
OVER_BUDGET = "the execution reached its budget"
#: The ``reason`` tag of ``crew.stop`` for each reason above (a mark: ``marked_<state>``); others, ``other``.
REASON_KEYS = {
    EXECUTION_TIMEOUT: "execution_timeout",
    WAIT_TIMEOUT: "timeout",
    REVIEW_TIMEOUT: "review_timeout",
    CLEARED: "cleared",
    AGENT_TIMEOUT: "agent_timeout",
    OVER_BUDGET: "over_budget",
}

# A task instance in one of these states after its wait was cut off has a reader still: a worker or
# a triggerer going away (running, deferred: the wait is re-created), or a retry that reattaches.
_LIVES_ON = frozenset({"running", "deferred", "up_for_retry", "up_for_reschedule"})
# What a clear leaves behind: no state, then a new try on its way.
_CLEARED = frozenset({"none", "scheduled", "queued", "restarting"})

# Base URLs whose service has no /stop (it answered 405, or 404 for the route), in this process: said
# once, then not asked again.
_NO_STOP_ENDPOINT: set[str] = set()


def reason_for_state(state: str | None, *, deferred: bool) -> str | None:
    """Why to stop the execution, from its task instance's state when the wait was cut off; None to
    leave it running.

    :param state: The task instance's state (``None`` after a clear), as Airflow's API answers it.
    :param deferred: The wait ran in a trigger. A cleared deferred task's new try may already run when
        its trigger is cancelled, so ``running`` then means cleared; a killed worker process whose
        task instance still runs is a worker going away (its task's retry reattaches).
    """
    word = "none" if state is None else str(getattr(state, "value", state)).lower()
    if word == "running" and deferred:
        return CLEARED
    if word in _LIVES_ON:
        return None
    if word in _CLEARED:
        return CLEARED
    return f"{MARKED}{word}"


def not_stopping(config: Any, kickoff_id: str, reason: str, log: Any, owner: Mapping[str, str]) -> bool:
    """Whether the execution is left running after all (the connection's ``stop_executions`` is off, or
    its service has no /stop); if so, the log line and ``crew.execution.left_running`` say so.

    :param config: The connection's ``CrewConnectionConfig``.
    """
    line = before_stop(config.base_url, kickoff_id, reason, enabled=config.stop_executions)
    if line is not None:
        log.info("%s", line)
        why = "stop_disabled" if not config.stop_executions else "no_stop_endpoint"
        metrics.count("crew.execution.left_running", **owner, why=why)
    return line is not None


def stop_said(
    config: Any, kickoff_id: str, reason: str, result: StopResult, log: Any, owner: Mapping[str, str]
) -> None:
    """The log line and the metrics of a stop's answer (``crew.stop``, and ``left_running`` when the
    execution may run on)."""
    from airflow_provider_crew.models import StopOutcome

    level, line = after_stop(config.base_url, kickoff_id, reason, result)
    log.log(level, "%s", line)
    answer = {StopOutcome.NOT_SUPPORTED: "no_stop_endpoint"}.get(result.outcome, result.outcome.name.lower())
    reason_key = REASON_KEYS.get(reason) or (
        f"marked_{reason.removeprefix(MARKED)}" if reason.startswith(MARKED) else "other"
    )
    metrics.count("crew.stop", reason=reason_key, answer=answer)
    if result.outcome in (StopOutcome.NOT_SUPPORTED, StopOutcome.UNKNOWN):
        why = "no_stop_endpoint" if result.outcome is StopOutcome.NOT_SUPPORTED else "stop_unknown"
        metrics.count("crew.execution.left_running", **owner, why=why)


def before_stop(base_url: str, kickoff_id: str, reason: str, *, enabled: bool) -> str | None:
    """The log line when the execution is not to be stopped after all, else None (stop it).

    :param base_url: The crew service's base URL.
    :param kickoff_id: The execution.
    :param reason: Why it would be stopped.
    :param enabled: The connection's ``stop_executions``.
    """
    if not enabled:
        return (
            f"Not stopping crew execution {kickoff_id} ({reason}): the connection's stop_executions is off."
        )
    if base_url in _NO_STOP_ENDPOINT:
        return (
            f"Not stopping crew execution {kickoff_id} ({reason}): the crew service at {base_url} has no "
            "POST /stop (learned earlier in this process). It runs on."
        )
    return None


def after_stop(base_url: str, kickoff_id: str, reason: str, result: StopResult) -> tuple[int, str]:
    """The log level and line of a stop's answer; a service without /stop is remembered.

    :param base_url: The crew service's base URL.
    :param kickoff_id: The execution.
    :param reason: Why it was stopped.
    :param result: What the service answered.
    """
    from airflow_provider_crew.models import StopOutcome

    line = f"Stopping crew execution {kickoff_id} ({reason}): {result.describe()}."
    if result.outcome is StopOutcome.NOT_SUPPORTED:
        _NO_STOP_ENDPOINT.add(base_url)
        return logging.WARNING, (
            f"{line} The crew service at {base_url} has no POST /stop, so the execution runs on; it is "
            "not asked again from this process. Turn the connection's stop_executions off to skip this."
        )
    if result.outcome is StopOutcome.UNKNOWN:
        return logging.WARNING, f"{line} It may still be running: check it at the service."
    return logging.INFO, line


async def finish_despite_cancels(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even when the caller is cancelled again meanwhile; ``work`` must bound
    its own time (the stop's reads and POST have deadlines).

    Airflow's triggerer (3.0 to 3.3.2) cancels a trigger again on every pass of its loop until the
    trigger has exited: ``TriggerRunner.cancel_triggers`` cancels every id of the supervisor's
    ``to_cancel``, which is re-sent until the trigger is gone. A second cancel cut a stop short, in
    the trigger's cancel handler (3.0-3.2) or in ``on_kill`` (3.3, which then swallows it): after the
    POST, before its log line, or before the POST on a slow state read (seen in CI on 3.1.8). Delete
    when the supported triggerers cancel a trigger once.
    """
    task = asyncio.ensure_future(work)
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue  # Airflow's cancel again: the work goes on; the caller re-raises the first one
        except Exception as error:
            logging.getLogger(__name__).warning("Stopping failed: %r", error)
