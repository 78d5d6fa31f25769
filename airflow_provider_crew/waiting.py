"""Waiting for an execution: the rules shared by the trigger (async) and the blocking paths (sync).

One place decides when a wait ends and how the poll interval grows, so a deferred and a
non-deferred task behave the same.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewNotFoundError,
)
from airflow_provider_crew.models import CrewState, CrewStatus

DEFAULT_POLL_INTERVAL = 2.0
DEFAULT_MAX_POLL_INTERVAL = 15.0
# Services may answer 404 for a fresh kickoff id while it is queued (field notes); beyond this
# window after the wait began, a 404 means the execution does not exist.
DEFAULT_NOT_FOUND_GRACE = 60.0


class WaitFor(str, enum.Enum):
    """What a wait ends on (besides failure, which always ends it)."""

    COMPLETION = "completion"  # SUCCESS or FAILED; a pause for human input keeps waiting
    HUMAN_INPUT = "human_input"  # the next pause for human input, or the end if none comes

    @classmethod
    def parse(cls, value: Any, parameter: str = "wait_for") -> WaitFor:
        try:
            return cls(value.value if isinstance(value, enum.Enum) else value)
        except ValueError:
            allowed = ", ".join(repr(member.value) for member in cls)
            raise CrewConfigurationError(
                f"{parameter}={value!r} is not known; use one of {allowed}."
            ) from None


class Outcome(str, enum.Enum):
    """How a wait ended: the ``status`` field of every trigger event."""

    SUCCEEDED = "succeeded"
    PAUSED = "paused"
    FAILED = "failed"
    NOT_FOUND = "not_found"
    TIMEOUT = "timeout"
    ERROR = "error"


class CrewWaitEvent(BaseModel):
    """The payload of the trigger's one event; ``execute_complete`` validates it with this model."""

    status: Outcome
    kickoff_id: str
    message: str
    record: dict[str, Any] | None = None

    @classmethod
    def parse(cls, event: Any) -> CrewWaitEvent:
        if not isinstance(event, dict):
            raise CrewError(f"Expected a crew status event from the trigger, got {event!r}.")
        try:
            return cls.model_validate(event)
        except ValidationError as error:
            raise CrewError(
                f"Malformed crew status event from the trigger ({error.error_count()} errors): {event!r}"
            ) from None

    @classmethod
    def from_result(cls, kickoff_id: str, result: WaitResult) -> CrewWaitEvent:
        return cls(
            status=result.outcome,
            kickoff_id=kickoff_id,
            message=result.message,
            record=result.status.raw if result.status is not None else None,
        )

    def to_result(self) -> WaitResult:
        status = CrewStatus.from_response(self.record) if self.record is not None else None
        return WaitResult(outcome=self.status, message=self.message, status=status)


def outcome_of(status: CrewStatus, wait_for: WaitFor) -> Outcome | None:
    """The outcome this status ends the wait with, or None to keep polling."""
    if status.state is CrewState.SUCCEEDED:
        return Outcome.SUCCEEDED
    if status.state is CrewState.FAILED:
        return Outcome.FAILED
    if status.state is CrewState.WAITING_FOR_HUMAN_INPUT and wait_for is WaitFor.HUMAN_INPUT:
        return Outcome.PAUSED
    return None


def is_permanent(error: CrewError) -> bool:
    """Errors that polling longer cannot fix (the hook has already retried the transient ones)."""
    return isinstance(error, (CrewAuthenticationError, CrewBadRequestError, CrewConfigurationError))


def next_poll_interval(current: float, maximum: float) -> float:
    """Grow the interval by half each poll up to the maximum, with jitter so waits spread out."""
    grown = min(maximum, current * 1.5)
    return max(0.05, random.uniform(grown * 0.8, grown))


class StateChangeLogger:
    """Logs one line per state change, not one per poll."""

    def __init__(self, log: logging.Logger | Any, kickoff_id: str) -> None:
        self._log = log
        self._kickoff_id = kickoff_id
        self._last: tuple[Any, ...] | None = None

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


class WaitResult(BaseModel):
    outcome: Outcome
    message: str
    status: CrewStatus | None = None


class Poller:
    """The decisions of one wait, without I/O: the trigger (async) and the worker (sync) drive it.

    Feed it each poll's result (a status, or the error the hook raised); it answers either the
    :class:`WaitResult` that ends the wait or the seconds to sleep before the next poll.
    """

    def __init__(
        self,
        kickoff_id: str,
        *,
        wait_for: WaitFor,
        deadline: float,
        not_found_deadline: float,
        poll_interval: float,
        max_poll_interval: float,
        log: logging.Logger | Any,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kickoff_id = kickoff_id
        self.wait_for = wait_for
        self.deadline = deadline
        self.not_found_deadline = not_found_deadline
        self.poll_interval = poll_interval
        self.max_poll_interval = max(max_poll_interval, poll_interval)
        self.log = log
        self.clock = clock
        self.last_status: CrewStatus | None = None
        self._interval = poll_interval
        self._log_state_change = StateChangeLogger(log, kickoff_id)

    def step(self, polled: CrewStatus | CrewError) -> WaitResult | float:
        if isinstance(polled, CrewNotFoundError):
            if self.clock() >= self.not_found_deadline:
                return WaitResult(
                    outcome=Outcome.NOT_FOUND, message=not_found_message(self.kickoff_id, polled)
                )
        elif isinstance(polled, CrewError):
            if is_permanent(polled):
                return WaitResult(outcome=Outcome.ERROR, message=str(polled), status=self.last_status)
            # The hook already retried with back-off; keep polling under the deadline.
            self.log.warning(
                "Polling crew execution %s failed (%s); will poll again.", self.kickoff_id, polled
            )
        else:
            self._log_state_change(polled)
            if self.last_status is not None and polled.raw_state != self.last_status.raw_state:
                self._interval = self.poll_interval  # something is happening: look again soon
            self.last_status = polled
            if (outcome := outcome_of(polled, self.wait_for)) is not None:
                return WaitResult(outcome=outcome, message=polled.describe(), status=polled)
        remaining = self.deadline - self.clock()
        if remaining <= 0:
            return WaitResult(
                outcome=Outcome.TIMEOUT,
                message=timeout_message(self.kickoff_id, self.last_status),
                status=self.last_status,
            )
        delay = min(self._interval, remaining)
        self._interval = next_poll_interval(self._interval, self.max_poll_interval)
        return delay


def wait_blocking(
    poller: Poller,
    get_status: Callable[[str], CrewStatus],
    sleep: Callable[[float], None] = time.sleep,
) -> WaitResult:
    """Poll in the worker until the wait ends (the non-deferrable path)."""
    while True:
        try:
            step = poller.step(get_status(poller.kickoff_id))
        except CrewError as error:
            step = poller.step(error)
        if isinstance(step, WaitResult):
            return step
        sleep(step)


def not_found_message(kickoff_id: str, error: CrewError) -> str:
    return (
        f"Crew execution {kickoff_id} not found: the service still answers 404 after the grace period "
        f"({error}). Check the kickoff id and that the connection points at the crew that started it."
    )


def timeout_message(kickoff_id: str, last_status: CrewStatus | None) -> str:
    where = last_status.describe() if last_status else "no status read yet"
    return (
        f"Timed out waiting for crew execution {kickoff_id} (last seen: {where}). The execution was not "
        "stopped and may still be running; raise `timeout` to wait longer."
    )
