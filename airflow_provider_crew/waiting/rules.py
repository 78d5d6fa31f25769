"""Waiting for an execution: the rules shared by every wait, without I/O.

:func:`decide` says how one poll's result ends a wait (or that it goes on); :class:`Poller` adds
the growing poll interval and the logging. The trigger (deferred), the worker (blocking) and the
sensor's ``poke`` all drive these, so every kind of wait ends the same way. :class:`CrewWaitEvent`
is the trigger's one event; :class:`FollowedExecution`, what a task keeps of the wait it ran.
"""

from __future__ import annotations

import enum
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewNotFoundError,
    CrewRedirectError,
    CrewResponseTooLargeError,
)
from airflow_provider_crew.status import CrewState, CrewStatus
from airflow_provider_crew.waiting.budget import Budget, SpendingPace
from airflow_provider_crew.waiting.state_log import StateChangeLogger

if TYPE_CHECKING:
    from airflow_provider_crew.connection import CrewConnectionConfig

DEFAULT_POLL_INTERVAL = 2.0
DEFAULT_MAX_POLL_INTERVAL = 15.0
# Services may answer 404 for a fresh kickoff id while it is queued (docs/contract.md, "404 right
# after kickoff"). The grace counts from the kickoff and ends early once the service has answered
# for the execution; after it, a 404 means the execution does not exist (or no longer does).
DEFAULT_NOT_FOUND_GRACE = 60.0
#: The share of a poll interval its jitter may take off.
POLL_JITTER = 0.2


class _ParameterChoice(str, enum.Enum):
    """A parameter's choice of values: parsing it names the parameter and the allowed values."""

    @classmethod
    def parse(cls, value: Any, parameter: str) -> Any:
        try:
            return cls(value.value if isinstance(value, enum.Enum) else value)
        except ValueError:
            allowed = ", ".join(repr(member.value) for member in cls)
            raise CrewConfigurationError(
                f"{parameter}={value!r} is not known; use one of {allowed}."
            ) from None


class WaitFor(_ParameterChoice):
    """What a wait ends on (besides failure, which always ends it)."""

    COMPLETION = "completion"  # SUCCESS or FAILED; a pause for human input keeps waiting
    HUMAN_INPUT = "human_input"  # the next pause for human input, or the end if none comes

    @classmethod
    def parse(cls, value: Any, parameter: str = "wait_for") -> WaitFor:
        return super().parse(value, parameter)  # type: ignore[no-any-return]


class OnHumanInput(_ParameterChoice):
    """What a task's wait does when the execution pauses for human input (``on_human_input``)."""

    RETURN = "return"  # end the task successfully; the paused task goes to XCom ``human_input``
    FAIL = "fail"  # fail the task without retry; the execution stays paused at the service
    WAIT = "wait"  # keep waiting: someone resumes the execution outside this task

    @classmethod
    def parse(cls, value: Any, parameter: str = "on_human_input") -> OnHumanInput:
        return super().parse(value, parameter)  # type: ignore[no-any-return]

    @property
    def wait_for(self) -> WaitFor:
        """What the wait ends on: a pause ends it unless the task keeps waiting through pauses."""
        return WaitFor.COMPLETION if self is OnHumanInput.WAIT else WaitFor.HUMAN_INPUT


class Outcome(str, enum.Enum):
    """How a wait ended: the ``outcome`` field of every trigger event."""

    SUCCEEDED = "succeeded"
    PAUSED = "paused"
    FAILED = "failed"
    NOT_FOUND = "not_found"
    TIMEOUT = "timeout"
    ERROR = "error"
    # The execution reached its cap (max_tokens, max_cost) short of its end: it is stopped, and its task
    # fails without retry (waiting/budget.py).
    OVER_BUDGET = "over_budget"
    # Not an end: the crew's webhook woke the wait (through Airflow's api-server). The task reads the
    # status itself and ends the wait, or waits on with the same deadlines (``CrewWaitEvent.wait``).
    WOKEN = "woken"


@dataclass(slots=True)
class FollowedExecution:
    """The execution a task follows, and how its wait ended: what its link and lineage facets read.

    :param kickoff_id: The execution, once the task knows it.
    :param config: The crew connection's settings, when the task read them.
    :param result: How the task's wait ended, when it did.
    :param url: The execution's page URL (None: the connection has no template).
    :param url_known: Whether ``url`` is known in this process.
    :param stopped: When the task stopped the execution: ``{"reason", "answer"}``.
    :param budget: The execution's caps, once the task read them (None: no cap).
    """

    kickoff_id: str | None = None
    config: CrewConnectionConfig | None = None
    result: WaitResult | None = None
    url: str | None = None
    url_known: bool = False
    stopped: dict[str, str] | None = None
    budget: Budget | None = None


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
    """Errors that polling longer cannot fix (the hook has already retried the transient ones).

    A body over the size cap and a refused redirect are named although both are configuration
    errors too: they end a wait because a repeat meets the same answer, not because of their base.
    """
    return isinstance(
        error,
        (
            CrewAuthenticationError,
            CrewBadRequestError,
            CrewConfigurationError,
            CrewResponseTooLargeError,
            CrewRedirectError,
        ),
    )


def grown_interval(current: float, maximum: float) -> float:
    """The interval after ``current``: half as long again, up to the maximum."""
    return min(maximum, current * 1.5)


def next_poll_interval(current: float, maximum: float) -> float:
    """The next poll's interval: :func:`grown_interval`, with jitter so waits spread out."""
    grown = grown_interval(current, maximum)
    return max(0.05, random.uniform(grown * (1 - POLL_JITTER), grown))


class WaitResult(BaseModel):
    """How a wait ended: the outcome, a message for the log or the error, the last status read."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field must fail, not vanish

    outcome: Outcome
    message: str
    last_status: CrewStatus | None = None
    # An execution stopped where the wait ended (a trigger stops one over its budget before it fires its
    # event): ``{"reason", "answer"}``, so that the task does not stop it again.
    stopped: dict[str, str] | None = None


def decide(
    polled: CrewStatus | CrewError,
    *,
    kickoff_id: str,
    wait_for: WaitFor,
    now: float,
    deadline: float,
    not_found_deadline: float,
    execution_seen: bool,
    last_status: CrewStatus | None,
    budget: Budget | None = None,
) -> WaitResult | None:
    """How one poll's result ends a wait, or None to poll again. No I/O, no clock, no state.

    :param polled: The status read, or the error the hook raised after its own retries.
    :param kickoff_id: The execution, for the messages.
    :param wait_for: What ends the wait besides failure.
    :param now: Epoch seconds of this poll.
    :param deadline: Epoch seconds at which the wait times out.
    :param not_found_deadline: Epoch seconds until which a 404 counts as a fresh kickoff not visible
        yet: the kickoff time plus the grace.
    :param execution_seen: The service answered a status for this execution before this poll; a 404
        then means it lost the execution, whatever the grace says.
    :param last_status: The latest status read before this poll, for the messages.
    :param budget: The execution's caps: a read short of the wait's end that reached one ends the wait
        ``over_budget`` (a finished execution is past stopping: its end ends the wait as usual).
    """
    if isinstance(polled, CrewNotFoundError):
        if execution_seen:
            return WaitResult(
                outcome=Outcome.NOT_FOUND,
                message=lost_message(kickoff_id, polled, last_status),
                last_status=last_status,
            )
        if now >= not_found_deadline:
            return WaitResult(outcome=Outcome.NOT_FOUND, message=not_found_message(kickoff_id, polled))
    elif isinstance(polled, CrewError):
        if is_permanent(polled):
            return WaitResult(outcome=Outcome.ERROR, message=str(polled), last_status=last_status)
    elif (outcome := outcome_of(polled, wait_for)) is not None:
        return WaitResult(outcome=outcome, message=polled.describe(), last_status=polled)
    elif budget is not None and not polled.is_terminal and budget.over(polled.usage):
        return WaitResult(
            outcome=Outcome.OVER_BUDGET,
            message=budget.over_message(kickoff_id, polled.usage),
            last_status=polled,
        )
    if now >= deadline:
        latest = polled if isinstance(polled, CrewStatus) else last_status
        return WaitResult(
            outcome=Outcome.TIMEOUT, message=timeout_message(kickoff_id, latest), last_status=latest
        )
    return None


class Poller:
    """One wait's state around :func:`decide`: the trigger, the worker and ``poke`` drive it.

    Feed it each poll's result (a status, or the error the hook raised); it answers either the
    :class:`WaitResult` that ends the wait or the seconds to sleep before the next poll. It remembers
    whether the service has answered for the execution, which ends the 404 grace.
    """

    # A triggerer holds one per wait: no per-instance dict.
    __slots__ = (
        "_interval",
        "_last_raw_state",
        "_last_record",
        "_log_state_change",
        "_logged_not_visible",
        "_pace",
        "budget",
        "clock",
        "deadline",
        "execution_seen",
        "kicked_off_at",
        "kickoff_id",
        "last_running_at",
        "log",
        "max_poll_interval",
        "not_found_deadline",
        "poll_interval",
        "reads",
        "wait_for",
    )

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
        execution_seen: bool = False,
        kicked_off_at: float | None = None,
        last_running_at: float | None = None,
        budget: Budget | None = None,
        pace: SpendingPace | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kickoff_id = kickoff_id
        self.kicked_off_at = kicked_off_at  # when the execution started, where the task knows it
        self.reads = 0  # status reads, for crew.execution.status_reads at the wait's end
        # The last read that did not end the wait (an earlier stretch's, before a deferral): the
        # crew ended after it, so it bounds crew.wait.end_lag.
        self.last_running_at = last_running_at
        self.wait_for = wait_for
        self.deadline = deadline
        self.not_found_deadline = not_found_deadline
        self.execution_seen = execution_seen
        self.poll_interval = poll_interval
        self.max_poll_interval = max(max_poll_interval, poll_interval)
        self.log = log
        self.clock = clock
        # The last status read, kept as compact JSON text (one untracked string, not a model and
        # its dicts): a triggerer holds one per wait, and only a wait's last message needs it.
        self._last_record: str | CrewStatus | None = None
        self._last_raw_state: str | None = None
        self._interval = poll_interval
        self._log_state_change = StateChangeLogger(log, kickoff_id)
        self._logged_not_visible = False
        # With a cap, the reads are paced by the spending rate (waiting/budget.py); without, nothing
        # is kept and the schedule is the growing poll interval alone.
        self.budget = budget
        self._pace = (pace or SpendingPace()) if budget is not None and budget.capped else None

    @property
    def last_status(self) -> CrewStatus | None:
        """The latest status read, or None (re-read from the record kept)."""
        if self._last_record is None or isinstance(self._last_record, CrewStatus):
            return self._last_record
        return CrewStatus.from_response(json.loads(self._last_record))

    def poll(self, read: Callable[[], CrewStatus]) -> WaitResult | float:
        """One poll: ``read`` the status and :meth:`step` with it, or with the error it raised. The
        blocking wait, the sensor's poke and the task's first read come here; the trigger to :meth:`apoll`."""
        try:
            polled: CrewStatus | CrewError = read()
        except CrewError as error:
            polled = error
        return self.step(polled)

    async def apoll(self, read: Awaitable[CrewStatus]) -> WaitResult | float:
        """:meth:`poll` in an event loop: ``read`` is the status request to await."""
        try:
            polled: CrewStatus | CrewError = await read
        except CrewError as error:
            polled = error
        return self.step(polled)

    def step(self, polled: CrewStatus | CrewError) -> WaitResult | float:
        """What the wait does after this poll: the result that ends it, or the seconds to the next."""
        now = self.clock()
        self.reads += 1
        # decide() reads it only to end a wait on an error; a status poll carries its own.
        last_status = self.last_status if isinstance(polled, CrewError) else None
        delay = self._observe(polled, now)
        result = decide(
            polled,
            kickoff_id=self.kickoff_id,
            wait_for=self.wait_for,
            now=now,
            deadline=self.deadline,
            not_found_deadline=self.not_found_deadline,
            execution_seen=self.execution_seen,
            last_status=last_status,
            budget=self.budget,
        )
        if result is not None:
            return result
        self.last_running_at = now
        if isinstance(polled, CrewNotFoundError) and not self._logged_not_visible:
            self._logged_not_visible = True
            self.log.info(
                "Crew execution %s is not visible yet (404); a fresh kickoff may be queued. "
                "Polling on for up to %.0f s.",
                self.kickoff_id,
                max(0.0, self.not_found_deadline - now),
            )
        if self._pace is not None and self.budget is not None and isinstance(polled, CrewStatus):
            paced = self._pace.after_read(now, self.budget, polled.usage, self.log, self.kickoff_id)
            delay = delay if paced is None else min(delay, paced)
        return delay

    @property
    def pace(self) -> SpendingPace | None:
        """The spending rate's last sample, for a trigger to go on from (None without a cap)."""
        return self._pace

    def _observe(self, polled: CrewStatus | CrewError, now: float) -> float:
        """Log what the poll showed, remember a sighting of the execution, and schedule the next poll:
        the seconds to it, should the wait go on. Before :func:`decide`, which reads no state it sets
        (a sighting matters to a 404, which is not one)."""
        if isinstance(polled, CrewStatus):
            self._log_state_change(polled)
            if self._last_record is not None and polled.raw_state != self._last_raw_state:
                self._interval = self.poll_interval  # something is happening: look again soon
            # A status built in code, not read from a record, is kept as it is.
            self._last_record = json.dumps(polled.raw, separators=(",", ":")) if polled.raw else polled
            self._last_raw_state = polled.raw_state
            if not self.execution_seen:
                self.execution_seen = True
                # Kept in the deadline too, so a trigger built from it fails a later 404 at once.
                self.not_found_deadline = min(self.not_found_deadline, now)
        elif not isinstance(polled, CrewNotFoundError) and not is_permanent(polled):
            # The hook already retried with back-off; keep polling under the deadline.
            self.log.warning(
                "Polling crew execution %s failed (%s); will poll again.", self.kickoff_id, polled
            )
        delay = min(self._interval, self.deadline - now)
        self._interval = next_poll_interval(self._interval, self.max_poll_interval)
        return delay


def wait_blocking(
    poller: Poller,
    get_status: Callable[[str], CrewStatus],
    sleep: Callable[[float], None] = time.sleep,
) -> WaitResult:
    """Poll in the worker until the wait ends (the non-deferrable path)."""
    while True:
        step = poller.poll(lambda: get_status(poller.kickoff_id))
        if isinstance(step, WaitResult):
            return step
        sleep(step)


def not_found_message(kickoff_id: str, error: CrewError) -> str:
    return (
        f"Crew execution {kickoff_id} not found: the service still answers 404 after the grace period "
        f"for a fresh kickoff ({error}). Check the kickoff id and that the connection points at the crew "
        "that started it."
    )


def lost_message(kickoff_id: str, error: CrewError, last_status: CrewStatus | None) -> str:
    seen = f" (last seen: {last_status.describe()})" if last_status is not None else ""
    return (
        f"The crew service no longer knows execution {kickoff_id}: it answered for this kickoff_id "
        f"before{seen} but now answers 404 ({error}). The service has probably lost its executions, "
        "for example by restarting without its store; this one cannot be waited for any more."
    )


def timeout_message(kickoff_id: str, last_status: CrewStatus | None) -> str:
    where = last_status.describe() if last_status else "no status read yet"
    return (
        f"Timed out waiting for crew execution {kickoff_id} (last seen: {where}); raise `timeout` to wait "
        "longer."
    )
