"""CrewStatusTrigger: waits for a crew execution in the triggerer, without holding a worker slot."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import random
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TaskSuccessEvent, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import TRIGGER_ON_KILL, task_instance_state, warm_execution_api
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.hooks.stop import stop
from airflow_provider_crew.models import StopResult
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.budget import Budget, SpendingPace
from airflow_provider_crew.waiting.end_metrics import wait_ended
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.race import hold_until
from airflow_provider_crew.waiting.rules import (
    DEFAULT_MAX_POLL_INTERVAL,
    DEFAULT_POLL_INTERVAL,
    POLL_JITTER,
    Outcome,
    Poller,
    WaitFor,
    WaitResult,
)
from airflow_provider_crew.waiting.xcom import end_log_line, result_xcoms

# The first poll comes this fraction of poll_interval to the whole of it after the trigger starts,
# at random: waits started together (a triggerer restart, a mapped task) do not poll together.
FIRST_POLL_JITTER = 0.5
# At most this many waits in one event loop make their first poll in any second. A triggerer that
# restarts with 10,000 waits, or 10,000 mapped tasks deferring at once, would otherwise send about
# 10,000 polls in one second: over three times what one loop serves (a poll costs 300-400 µs of
# the triggerer's CPU), so every poll would queue, the loop would lag for every trigger in it and
# the crew service would take the whole burst. Waits started one at a time are not delayed.
FIRST_POLLS_PER_SECOND = 500.0
# With webhook wake, until the race bound (``not_before``) the trigger polls at least this often: a
# wake before the bound is not applied (it would resume a worker into Airflow's race), so a crew that
# ends then is found by these polls and, where the trigger ends the task, ended within seconds.
RACE_WINDOW_POLL_INTERVAL = 4.0
# How long a cancelled trigger waits for Airflow to say its task instance's state. During a
# triggerer's shutdown, 3.2+ never answer (their channel's reader is gone): then nothing is stopped.
# A triggerer's first request to its in-process execution API builds the API's routes first (3-4 s
# measured here, beside other work): 5 s lost the first stop after a triggerer started. The state
# and the stop fit in 3.3's [triggerer] on_kill_timeout (30 s).
STATE_QUERY_SECONDS = 12.0
# How long the stop itself may take from a trigger.
STOP_SECONDS = 12.0


class FirstPollPacer:
    """Holds the first polls of the waits in one event loop to ``per_second``: a token bucket.

    The bucket holds a second's worth of first polls and refills at ``per_second``. A wait started
    alone, or among a few hundred, takes a token and polls when it wanted to; in a herd, a wait past
    the bucket's worth polls that much later: 10,000 started together at 500 a second spread their
    first polls over 20 s.

    :param per_second: The most first polls in one second, after a second's worth at once.
    """

    __slots__ = ("__weakref__", "_at", "_per_second", "_tokens")

    def __init__(self, per_second: float = FIRST_POLLS_PER_SECOND) -> None:
        self._per_second = per_second
        self._tokens = per_second  # below 0: the backlog of a herd, in first polls
        self._at = -math.inf  # the loop time the tokens were counted at

    def delay(self, wanted: float, now: float) -> float:
        """Seconds from ``now`` (the loop's time) to a first poll wanted ``wanted`` seconds from now."""
        refilled = self._tokens + (now - self._at) * self._per_second
        self._tokens, self._at = min(self._per_second, refilled) - 1, now
        return wanted + max(0.0, -self._tokens / self._per_second)

    @classmethod
    def for_running_loop(cls) -> FirstPollPacer:
        """The running event loop's pacer (a triggerer runs every trigger in one loop)."""
        loop = asyncio.get_running_loop()
        pacer = _loop_pacers.get(loop)
        if pacer is None:
            pacer = _loop_pacers[loop] = cls()
        return pacer


_loop_pacers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FirstPollPacer] = (
    weakref.WeakKeyDictionary()
)


def first_poll_delay(
    poll_interval: float, deadline: float, now: float, *, pacer: FirstPollPacer | None = None
) -> float:
    """Seconds until a wait's first poll: a random part of ``poll_interval``, never past the deadline.

    :param poll_interval: The wait's first poll interval.
    :param deadline: Epoch seconds of the wait's deadline.
    :param now: Epoch seconds now.
    :param pacer: The event loop's :class:`FirstPollPacer`, which may put the poll later when many
        waits start together.
    """
    delay = random.uniform(poll_interval * FIRST_POLL_JITTER, poll_interval)
    if pacer is not None:
        delay = pacer.delay(delay, asyncio.get_running_loop().time())
    return max(0.0, min(delay, deadline - now))


class CrewStatusTrigger(BaseTrigger):
    """
    Poll a crew execution's status until it finishes (or pauses for human input), then fire one event.

    Where nothing needs a worker at the task's end, the task says so (``ends_task_when_finished``,
    ``ends_task_when_paused``): such an end is the end of the task, sent as Airflow's
    ``TaskSuccessEvent``, after pushing the XComs the worker would have pushed (the kickoff id as
    return value, ``result`` or ``human_input``, ``status``, ``usage``; :func:`push_xcoms`). No
    worker starts and Airflow's deferral race cannot happen, so nothing is held back. Any other end
    resumes the task on a worker (``execute_complete``), held until ``not_before``, with an event
    (:class:`~airflow_provider_crew.waiting.event.CrewWaitEvent`) that carries the last status record
    and, at a SUCCEEDED end, the final output once: the record comes without its copies of it.

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
    :param kicked_off_at: Epoch seconds the execution started, when the task knows it (for
        ``crew.execution.duration``).
    :param last_running_at: Epoch seconds of the task's last read that saw the execution short of
        its end, before it deferred (bounds ``crew.wait.end_lag`` when the trigger's first read ends it).
    :param not_before: Epoch seconds before which no event is fired, however soon the wait ends. The
        task that deferred sets it to when Airflow has surely handled its exit (see
        :func:`airflow_provider_crew.waiting.race.deferral_settle_seconds`): an event that resumes the task
        before that can get it failed by Airflow's stale executor-event race.
    :param safety_poll_interval: Seconds between polls after the first one, when the crew's webhooks
        wake the wait (docs/webhook-wake.md); 0 polls on ``poll_interval``'s growing schedule. Until
        ``not_before`` the trigger polls at least every :data:`RACE_WINDOW_POLL_INTERVAL` seconds all
        the same: no wake is applied before then.
    :param ends_task_when_finished: A SUCCESS ends the task from here, successfully.
    :param ends_task_when_paused: A pause that ends the wait ends the task from here, successfully.
        Any end not named by these two resumes the task on a worker.
    :param stop_crew: Stop the execution when a user ends the deferred task (marks it failed or
        success, or clears it) and Airflow cancels this trigger; never when a triggerer restarts or
        hands the trigger to another (:meth:`stop_if_abandoned`). The api-server's listener reads it
        too, for a task marked while no triggerer runs this trigger
        (:mod:`~airflow_provider_crew.plugins.stop_listener`).
    :param budget: The execution's caps and prices (``Budget.to_kwargs``): a read over a cap stops the
        execution here, when ``stop_crew``, and resumes the task on a worker to fail it; the reads are
        paced by the spending rate (waiting/budget.py). None: no cap, no prices.
    :param pace: The spending rate's last sample, as the task's read left it (``SpendingPace.to_kwargs``).
    """

    budget: dict[str, Any] | None = None
    pace: list[Any] | None = None

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
        kicked_off_at: float | None = None,
        last_running_at: float | None = None,
        safety_poll_interval: float = 0.0,
        ends_task_when_finished: bool = False,
        ends_task_when_paused: bool = False,
        stop_crew: bool = False,
        budget: dict[str, Any] | None = None,
        pace: list[Any] | None = None,
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
        self.kicked_off_at = None if kicked_off_at is None else float(kicked_off_at)
        self.last_running_at = None if last_running_at is None else float(last_running_at)
        self.safety_poll_interval = max(0.0, float(safety_poll_interval))
        self.ends_task_when_finished = bool(ends_task_when_finished)
        self.ends_task_when_paused = bool(ends_task_when_paused)
        self.stop_crew = bool(stop_crew)
        if budget is not None:  # else the class's None: a wait without a budget holds nothing more
            self.budget, self.pace = budget, pace
        self._fired = False  # an event went out: a cancel after it is Airflow's hand-off, not a user's

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
                "kicked_off_at": self.kicked_off_at,
                "last_running_at": self.last_running_at,
                "safety_poll_interval": self.safety_poll_interval,
                "ends_task_when_finished": self.ends_task_when_finished,
                "ends_task_when_paused": self.ends_task_when_paused,
                "stop_crew": self.stop_crew,
                **({"budget": self.budget, "pace": self.pace} if self.budget is not None else {}),
            },
        )

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> CrewStatusTrigger:
        """The trigger as stored in Airflow's database (its kwargs), e.g. to go on with a woken wait.
        Arguments of another provider release that this one does not know are left out."""
        known = inspect.signature(cls.__init__).parameters
        return cls(**{name: value for name, value in kwargs.items() if name in known})

    def poller(self, log: logging.Logger | Any) -> Poller:
        """This wait's rules and state (:class:`~airflow_provider_crew.waiting.rules.Poller`).

        Woken by webhook, the wait polls once soon (the execution may have ended before the task
        deferred, when its webhook found nothing to wake), then only as a slow safety net.
        """
        if self.safety_poll_interval:
            interval = maximum = self.safety_poll_interval
        else:
            interval, maximum = self.poll_interval, self.max_poll_interval
        return Poller(
            self.kickoff_id,
            wait_for=WaitFor(self.wait_for),
            deadline=self.deadline,
            not_found_deadline=self.not_found_deadline,
            poll_interval=interval,
            max_poll_interval=maximum,
            log=log,
            execution_seen=self.execution_seen,
            kicked_off_at=self.kicked_off_at,
            last_running_at=self.last_running_at,
            budget=Budget.from_kwargs(self.budget),
            pace=SpendingPace.from_kwargs(self.pace) if self.pace else None,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # A triggerer may hold 10,000 waits: between polls each keeps only its kwargs, this frame,
        # a hook and a Poller. The hook looks the connection up once per loop for all waits on it,
        # and the logger is the class's, not one per trigger.
        # The operator read the status just before deferring: look again within one interval.
        pacer = FirstPollPacer.for_running_loop()
        first = first_poll_delay(self.poll_interval, self.deadline, time.time(), pacer=pacer)
        poller = self.poller(type(self).logger())
        if poller.pace is not None and poller.pace.due is not None:  # a cap: the task's read set it
            first = min(first, max(0.0, poller.pace.due - time.time()))
        warm_execution_api(self.task_instance)
        hook = CrewHook(self.crew_conn_id)
        safety_poll = False  # whether this poll came on the safety interval, past the race bound
        try:
            await asyncio.sleep(first)
            while True:
                read = hook.aget_status(self.kickoff_id, deadline=self.deadline)
                step = await poller.apoll(read)
                if isinstance(step, WaitResult):
                    wait_ended(self._task_tags(), step, poller)
                    if safety_poll:
                        self._say_no_wake_came(poller.log, step)
                    if step.outcome is Outcome.OVER_BUDGET:
                        step = await self._stop_over_budget(step, poller.log)
                    event = await self._event(step, poller.log, poller.budget)
                    self._fired = True
                    yield event
                    return
                in_race_window = time.time() < self.not_before
                if self.safety_poll_interval and in_race_window:
                    step = min(step, RACE_WINDOW_POLL_INTERVAL)
                # Not a read a cap's pace brought forward (waiting/budget.py).
                safety_poll = not in_race_window and step >= self.safety_poll_interval * (1 - POLL_JITTER) > 0
                await asyncio.sleep(step)
        except asyncio.CancelledError:
            wait_ended(self._task_tags(), None, poller)  # its reads: a wake or a user ended the wait
            if not TRIGGER_ON_KILL:  # else Airflow calls on_kill for a user's action
                await stopping.finish_despite_cancels(self.stop_if_abandoned())
            raise

    def _task_tags(self) -> dict[str, str]:
        return metrics.task_tags(self.task_instance) if self.task_instance is not None else {}

    async def on_kill(self) -> None:
        """Airflow 3.3+: a user ended the deferred task, or the trigger moves to another triggerer."""
        await stopping.finish_despite_cancels(self.stop_if_abandoned())

    @property
    def woken_by_webhook(self) -> bool:
        """The crew's webhooks wake this wait (docs/webhook-wake.md)."""
        return self.safety_poll_interval > 0

    def may_stop(self) -> bool:
        """Whether a user's end of the deferred task stops the execution: with ``stop_crew``, before the
        trigger fired its event and before its deadline (Airflow's own time-out is not a user's end)."""
        return self.stop_crew and not self._fired and time.time() < self.deadline

    async def stop_if_abandoned(self) -> None:
        """Stop the execution when Airflow cancelled this trigger because a user ended its task.

        A cancel says nothing of why (3.0-3.2), and 3.3's "user action" also covers a trigger taken
        over by another triggerer, so the task instance's state decides (:mod:`~.waiting.stopping`):
        a task still deferred keeps its execution (a triggerer restart, a move, a shutdown), and so
        does one whose state cannot be read in time. A trigger past its timeout, or one that fired its
        event, was ended by Airflow's own course: its task's worker handles the end.

        With the webhook wake on, nothing: a wake ends the deferral from outside as a user's action does.
        A user's mark is then the api-server's listener's to stop (:mod:`~.plugins.stop_listener`).
        """
        if not self.may_stop() or self.woken_by_webhook or self.task_instance is None:
            return
        log = type(self).logger()
        ti = self.task_instance
        query = sync_to_async(task_instance_state)(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        try:
            # Shielded: cancelling a request in flight on 3.0-3.1's channel breaks the next one.
            state = await asyncio.wait_for(asyncio.shield(query), STATE_QUERY_SECONDS)
        except Exception as error:
            log.info(
                "Not stopping crew execution %s: its task's state is unknown (%r).", self.kickoff_id, error
            )
            return
        reason = stopping.reason_for_state(state, deferred=True)
        if reason is None:
            return  # the task is still deferred: a triggerer restart or hand-over, not a user
        await self._stop(reason, log, unless_reached=WaitFor(self.wait_for))

    async def _stop(self, reason: str, log: Any, unless_reached: WaitFor | None = None) -> StopResult | None:
        """The one stop (:func:`~airflow_provider_crew.hooks.stop.stop`), sync as the task's, in a pool
        thread: not the one thread other triggers' connection lookups take (a stop is rare)."""
        return await sync_to_async(stop, thread_sensitive=False)(
            CrewHook(self.crew_conn_id),
            self.kickoff_id,
            reason,
            log,
            patience=STOP_SECONDS,
            owner=self._task_tags(),
            unless_reached=unless_reached,
        )

    async def _stop_over_budget(self, result: WaitResult, log: Any) -> WaitResult:
        """Stop an execution over its budget here, at once (the worker that fails its task starts seconds
        later); with ``stop_crew`` off, the worker says so and leaves it running."""
        if not self.stop_crew:
            return result
        answer = await self._stop(stopping.OVER_BUDGET, log)
        said = answer.outcome.value if answer is not None else "not stopped"
        return result.model_copy(update={"stopped": {"reason": stopping.OVER_BUDGET, "answer": said}})

    async def _event(
        self, result: WaitResult, log: logging.Logger | Any, budget: Budget | None = None
    ) -> TriggerEvent:
        """The task's end, when this trigger may end it; else the event that resumes it on a worker,
        held until Airflow's race bound."""
        ends_task = {
            Outcome.SUCCEEDED: self.ends_task_when_finished,
            Outcome.PAUSED: self.ends_task_when_paused,
        }
        if ends_task.get(result.outcome, False):
            log.info("%s", end_log_line(self.kickoff_id, result))
            # Said before the push, not after: a trigger's log lines travel apart from its end, and
            # Airflow (3.0-3.3) writes those it reads after the end to the triggerer's own log (not
            # reported upstream as such; nearest: apache/airflow#66158). The order costs nothing, so
            # it may stay after a fix; only the e2e test's look into the triggerer's log can go then.
            log.info("The triggerer ends the task: nothing needs a worker at its end.")
            prices = budget.prices if budget is not None else None
            xcoms = {"return_value": self.kickoff_id, **result_xcoms(self.kickoff_id, result, prices)}
            try:
                await push_xcoms(self.task_instance, xcoms)
                return TaskSuccessEvent()
            except Exception as error:  # a crashed trigger fails the task: its crew succeeded
                log.warning(
                    "Could not push the wait's XComs from the triggerer (%s); a worker ends the task.", error
                )
        await hold_until(self.not_before)
        return TriggerEvent(CrewWaitEvent.from_result(self.kickoff_id, result).payload())

    def _say_no_wake_came(self, log: logging.Logger | Any, result: WaitResult) -> None:
        """A woken wait whose end a safety poll found: the crew's webhook never woke it. Said once,
        in the task's log, so that a silent misconfiguration is visible (a wake would have ended the
        wait, and with it this trigger, before this poll)."""
        log.warning(
            "Webhook wake is on, but no webhook woke this wait: the safety poll (every %g s) found "
            "crew execution %s %s. Check that the crew service reaches the webhook receiver's address "
            "and that its webhook sender can call it (docs/webhook-wake.md, 'When no wake comes').",
            self.safety_poll_interval,
            self.kickoff_id,
            result.outcome.value,
        )


async def push_xcoms(task_instance: Any, xcoms: dict[str, Any]) -> None:
    """Push ``xcoms`` for the task instance a trigger ends, the way its worker would: through the
    configured XCom backend and the triggerer's execution API.

    Not as the ``xcoms`` of Airflow's ``TaskSuccessEvent``: Airflow 3.0 to 3.3.2 store those
    JSON-encoded twice, so a task pulling one gets the JSON text (``'"3f2c..."'``), not the value.
    The triggerer serves a trigger's XCom writes from 3.0 on. The call blocks on the triggerer's
    channel, so it runs in a thread, as the compat provider's connection lookup does. Found here
    (2026-11), no upstream issue yet (the path: ``_process_BaseTaskEndEvent`` → ``xcom_push`` →
    ``XComModel.set(serialize=True)`` into a JSON column). Once the oldest supported Airflow stores
    an end event's ``xcoms`` once, send them with the event and delete this function.
    """
    from airflow.providers.common.compat.sdk import XCom

    def push() -> None:
        for key, value in xcoms.items():
            XCom.set(
                key,
                value,
                dag_id=task_instance.dag_id,
                task_id=task_instance.task_id,
                run_id=task_instance.run_id,
                map_index=task_instance.map_index,
            )

    # Shielded from the trigger's cancellation (a webhook's wake, or a user, ending the deferral while
    # it pushes): asgiref cancels the thread's in-flight request with it, after the request was written
    # and before its answer was read, and Airflow 3.1's trigger runner then reads that answer as its
    # own next one and exits ("Response read out of order"). Shielded, the push reads its answer.
    await asyncio.shield(sync_to_async(push)())
