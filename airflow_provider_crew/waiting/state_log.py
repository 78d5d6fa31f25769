"""What a wait logs of its execution's state: one line per change, not one per poll, and a state word
the client does not know once. No I/O but the log."""

from __future__ import annotations

import logging
from typing import Any

from airflow_provider_crew.status import UNKNOWN_STATE_TREATMENT, CrewStatus


class StateChangeLogger:
    """Logs one line per state change, not one per poll, and warns once per wait of a state word the
    client does not know (to the wait's own log: the task's, or the trigger's, which Airflow routes
    to the task's)."""

    __slots__ = ("_kickoff_id", "_last", "_log", "_warned_unknown_state")

    def __init__(self, log: logging.Logger | Any, kickoff_id: str) -> None:
        self._log = log
        self._kickoff_id = kickoff_id
        self._last: tuple[Any, ...] | None = None
        self._warned_unknown_state = False

    def __call__(self, status: CrewStatus) -> None:
        progress = status.progress
        key = (
            status.raw_state,
            status.message,
            progress.completed if progress else None,
            progress.current_task if progress else None,
        )
        if key != self._last:
            self._last = key
            self._log.info("Crew execution %s: %s", self._kickoff_id, status.describe())
        if not status.state_known and not self._warned_unknown_state:
            self._warned_unknown_state = True
            if status.raw_state:
                what = f"state {status.raw_state!r}, which this client does not know"
            else:
                what = "no state word (no text in its 'state' or 'status')"
            self._log.warning(
                "Crew execution %s reports %s; %s.", self._kickoff_id, what, UNKNOWN_STATE_TREATMENT
            )


__all__ = ["StateChangeLogger"]
