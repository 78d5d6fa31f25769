"""Waiting for a crew execution, in one place.

- :mod:`.rules`: how one poll's result ends a wait (or not), the poll schedule, the trigger's
  event; no I/O. The trigger, the worker and the sensor's ``poke`` all follow them.
- :mod:`.task`: the wait as a task runs it (:class:`~.task.CrewWaitMixin`): read once, then defer
  to the trigger or poll in the worker, and turn the outcome into XCom values or an error.

The names of :mod:`.rules` are importable from here too (``from airflow_provider_crew.waiting
import decide``), where they lived before the package was split.
"""

from __future__ import annotations

from airflow_provider_crew.waiting.rules import (
    DEFAULT_MAX_POLL_INTERVAL,
    DEFAULT_NOT_FOUND_GRACE,
    DEFAULT_POLL_INTERVAL,
    CrewWaitEvent,
    FollowedExecution,
    Outcome,
    Poller,
    StateChangeLogger,
    WaitFor,
    WaitResult,
    decide,
    is_permanent,
    lost_message,
    next_poll_interval,
    not_found_message,
    outcome_of,
    timeout_message,
    wait_blocking,
)

__all__ = [
    "DEFAULT_MAX_POLL_INTERVAL",
    "DEFAULT_NOT_FOUND_GRACE",
    "DEFAULT_POLL_INTERVAL",
    "CrewWaitEvent",
    "FollowedExecution",
    "Outcome",
    "Poller",
    "StateChangeLogger",
    "WaitFor",
    "WaitResult",
    "decide",
    "is_permanent",
    "lost_message",
    "next_poll_interval",
    "not_found_message",
    "outcome_of",
    "timeout_message",
    "wait_blocking",
]
