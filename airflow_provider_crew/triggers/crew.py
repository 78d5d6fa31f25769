"""CrewStatusTrigger: waits for a crew execution in the triggerer, without holding a worker slot."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_crew.exceptions import CrewError
from airflow_provider_crew.hooks.triggerer import aget_status_shared, shared_connection
from airflow_provider_crew.waiting import (
    DEFAULT_MAX_POLL_INTERVAL,
    DEFAULT_POLL_INTERVAL,
    CrewWaitEvent,
    Poller,
    WaitFor,
    WaitResult,
)

# The first poll comes this fraction of poll_interval to the whole of it after the trigger starts,
# at random: waits started together (a triggerer restart, a mapped task) do not poll together.
FIRST_POLL_JITTER = 0.5


def first_poll_delay(poll_interval: float, deadline: float, now: float) -> float:
    """Seconds until a wait's first poll: a random part of ``poll_interval``, never past the deadline."""
    delay = random.uniform(poll_interval * FIRST_POLL_JITTER, poll_interval)
    return max(0.0, min(delay, deadline - now))


class CrewStatusTrigger(BaseTrigger):
    """
    Poll a crew execution's status until it finishes (or pauses for human input), then fire one event.

    Every kwarg is a JSON primitive and none is a secret: the token is looked up from the
    connection, asynchronously, when the trigger runs. Deadlines are absolute (epoch seconds), so a
    triggerer restart re-creates the trigger from its kwargs and it carries on where it was.

    :param kickoff_id: The execution to watch.
    :param crew_conn_id: The ``crew`` connection.
    :param wait_for: ``"completion"``, or ``"human_input"`` to stop at the next pause as well.
    :param deadline: Epoch seconds after which the trigger fires a ``timeout`` event.
    :param not_found_deadline: Epoch seconds until which a 404 counts as "still queued".
    :param poll_interval: First interval between polls, in seconds; grows with jitter up to
        ``max_poll_interval``.
    :param max_poll_interval: Longest interval between polls, in seconds.
    :param execution_seen: The task saw the execution before deferring: a 404 now means the service
        lost it, not that it is still queued.
    :param not_before: Epoch seconds before which no event is fired, however soon the wait ends. The
        task that deferred sets it to when Airflow has surely handled its exit (see
        :func:`airflow_provider_crew._compat.deferral_settle_seconds`): an event that resumes the task
        before that can get it failed by Airflow's stale executor-event race.
    """

    def __init__(
        self,
        *,
        kickoff_id: str,
        crew_conn_id: str,
        wait_for: str,
        deadline: float,
        not_found_deadline: float,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        not_before: float = 0.0,
        execution_seen: bool = False,
    ) -> None:
        super().__init__()
        self.kickoff_id = kickoff_id
        self.crew_conn_id = crew_conn_id
        self.wait_for = WaitFor.parse(wait_for).value
        self.deadline = float(deadline)
        self.not_found_deadline = float(not_found_deadline)
        self.poll_interval = float(poll_interval)
        self.max_poll_interval = float(max(max_poll_interval, poll_interval))
        self.not_before = float(not_before)
        self.execution_seen = bool(execution_seen)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kickoff_id": self.kickoff_id,
                "crew_conn_id": self.crew_conn_id,
                "wait_for": self.wait_for,
                "deadline": self.deadline,
                "not_found_deadline": self.not_found_deadline,
                "poll_interval": self.poll_interval,
                "max_poll_interval": self.max_poll_interval,
                "not_before": self.not_before,
                "execution_seen": self.execution_seen,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # A triggerer may hold 10,000 waits: between polls each keeps only its kwargs, this frame
        # and a Poller. The connection is looked up once per loop for all waits on it
        # (shared_connection) and the logger is the class's, not one per trigger.
        poller = Poller(
            self.kickoff_id,
            wait_for=WaitFor(self.wait_for),
            deadline=self.deadline,
            not_found_deadline=self.not_found_deadline,
            poll_interval=self.poll_interval,
            max_poll_interval=self.max_poll_interval,
            log=type(self).logger(),
            execution_seen=self.execution_seen,
        )
        # The operator read the status just before deferring: look again within one interval.
        await asyncio.sleep(first_poll_delay(self.poll_interval, self.deadline, time.time()))
        while True:
            try:
                connection = await shared_connection(self.crew_conn_id)
                status = await aget_status_shared(connection, self.kickoff_id, deadline=self.deadline)
                step = poller.step(status)
            except CrewError as error:
                step = poller.step(error)
            if isinstance(step, WaitResult):
                await hold_until(self.not_before)
                yield TriggerEvent(CrewWaitEvent.from_result(self.kickoff_id, step).model_dump(mode="json"))
                return
            await asyncio.sleep(step)


async def hold_until(not_before: float) -> None:
    """Sleep until ``not_before`` (epoch seconds); return at once when it has passed."""
    delay = not_before - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
