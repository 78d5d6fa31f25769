"""How a crew task stops the execution whose wait it owns, when something other than the crew ends
the wait (:mod:`~airflow_provider_crew.waiting.stopping` says when and why; the trigger does the same
for a deferred task).

A task's process ends its wait without the crew in three ways: Airflow kills it (:meth:`on_kill`:
``execution_timeout``, a user marking it failed or success or clearing it, a worker shutting down),
the wait's own ``timeout`` passes, or a review round's ``response_timeout`` passes
(:meth:`_stop_cut_off_wait`). And the crew reaches its budget (``max_tokens``, ``max_cost``:
:mod:`~airflow_provider_crew.waiting.budget`): :meth:`_end_over_budget` stops it, unless its trigger
already did, and fails the task without retry.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import is_task_timeout, task_instance_state
from airflow_provider_crew.exceptions import CrewBudgetExceededError, CrewConfigurationError
from airflow_provider_crew.hooks.crew import STOP_PATIENCE_SECONDS, CrewHook
from airflow_provider_crew.hooks.stop import stop
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.budget import (
    DEFERRAL_GAP_SECONDS,
    Budget,
    Prices,
    budget_for,
    cap_value,
    checked_cap,
)
from airflow_provider_crew.waiting.rules import FollowedExecution, Poller, WaitResult
from airflow_provider_crew.waiting.xcom import XCOM_STATUS, XCOM_USAGE, record_without_output, result_xcoms

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_crew.connection import CrewConnectionConfig
    from airflow_provider_crew.status import CrewStatus

# How long a killed task's process spends on stopping its execution: Airflow sends SIGKILL 5 s after
# asking it to stop. The task instance's state is asked first, in this much of it.
ON_KILL_SECONDS = 4.5
ON_KILL_STATE_SECONDS = 1.5
#: The template fields of every crew task that may stop its execution at a cap.
BUDGET_TEMPLATE_FIELDS = ("max_tokens", "max_cost")


def checked_stop_crew(value: Any) -> bool | None:
    """``stop_crew`` as given, once it is True, False or None; anything else fails at DAG parse, naming
    it (a string such as ``"false"`` would otherwise read as true)."""
    if value is None or isinstance(value, bool):
        return value
    raise CrewConfigurationError(
        f"stop_crew must be True, False or None (None: stop the execution when this task owns its wait), "
        f"got {value!r}."
    )


class CrewStopMixin:
    """Stopping the execution a task waits for; mixed into :class:`~.wait.CrewWaitMixin`.

    :param stop_crew: Stop the execution (``POST /stop/{kickoff_id}``) when something other than the
        crew ends this task's wait: Airflow's ``execution_timeout``, the wait's ``timeout``, a user who
        marks the task failed or success or clears it. ``None`` stops it when the task owns the wait
        (the kickoff, a resume, the review); a sensor only watches, so it leaves it running unless
        ``True``. Never stopped: a retry that reattaches, a triggerer restart, a task that did not wait;
        nor with the connection's ``stop_executions`` off, nor a deferred wait a user clears while the
        webhook wake is on (docs/reliability.md).
    :param max_tokens: Stop the execution once it has spent this many tokens in all (the service's
        ``usage_metrics`` total, across review rounds), and fail the task without retry. None: the crew
        connection's 'Max tokens per execution' (extra ``max_usage``), if any. Templated.
    :param max_cost: The same for its cost, in the currency of the connection's prices (which it
        needs). None: the connection's 'Max cost per execution'. Templated.
    """

    crew_conn_id: str
    log: Any
    crew_execution: FollowedExecution | None = None
    #: ``stop_crew=None`` stops the execution when the task owns its wait: the kickoff, a resume and the
    #: review's tasks do; a sensor only watches (docs/reliability.md, "Stopping what nobody waits for").
    owns_execution: ClassVar[bool] = True
    #: Whether the task's own POST subscribes to the crew's event stream (a kickoff, a resume), so that
    #: its task instance keeps the execution's events (``crew_events``); a sensor only watches.
    subscribes_to_events: ClassVar[bool] = False
    stop_crew: bool | None = None
    max_tokens: Any = None
    max_cost: Any = None
    # While a wait runs in this process: the execution, the task's context and the connection's settings.
    _waiting: tuple[str, Context, CrewConnectionConfig] | None = None

    def _stops_crew(self) -> bool:
        """Whether this task stops its execution when something other than the crew ends its wait."""
        return self.owns_execution if self.stop_crew is None else bool(self.stop_crew)

    # -- the budget: what one execution may spend (waiting/budget.py) -------------------------------

    def _set_budget(self, max_tokens: Any, max_cost: Any) -> None:
        """Check and keep ``max_tokens`` and ``max_cost`` at DAG parse (a template, at task start). A cap
        is enforced by stopping the execution: a task that does not stop it cannot have one."""
        self.max_tokens = checked_cap(max_tokens, "max_tokens")
        self.max_cost = checked_cap(max_cost, "max_cost")
        if (self.max_tokens is not None or self.max_cost is not None) and not self._stops_crew():
            fix = "set stop_crew=True" if not self.owns_execution else "leave stop_crew at None or True"
            raise CrewConfigurationError(
                "max_tokens and max_cost stop the execution at the cap, and this task does not stop it "
                f"(stop_crew={self.stop_crew!r}): {fix}, or remove the cap."
            )

    def _task_budget(self, config: CrewConnectionConfig | None = None) -> Budget | None:
        """This try's budget: its caps (else the connection's, for a task that stops its execution) and
        the connection's prices. Read at task start, before anything is paid: a bad cap fails there."""
        if "_crew_budget" not in self.__dict__:
            config = config or CrewHook(crew_conn_id=self.crew_conn_id).config
            self.__dict__["_crew_budget"] = budget_for(
                self.max_tokens,
                self.max_cost,
                config=config,
                conn_id=self.crew_conn_id,
                defaults=self._stops_crew(),
            )
        return self.__dict__["_crew_budget"]  # type: ignore[no-any-return]

    def _end_over_budget(self, kickoff_id: str, result: WaitResult, context: Context | None) -> NoReturn:
        """Stop an execution that reached its budget (unless its trigger did), push its ``usage``, and fail
        the task without retry: a retry would start paying again."""
        if result.stopped is None:
            came_of_it = self._stop_cut_off_wait(kickoff_id, stopping.OVER_BUDGET, context)
        else:  # the trigger stopped it, at once
            came_of_it = f"{result.stopped['answer']}, by the triggerer"
            if self.crew_execution is not None:
                self.crew_execution.stopped = result.stopped
            if context is not None:
                self._after_stop(context, kickoff_id, result.stopped)
        budget = self._optional_budget()
        usage = result_xcoms(kickoff_id, result, self._prices()).get(XCOM_USAGE)
        if context is not None and usage is not None:
            context["ti"].xcom_push(key=XCOM_USAGE, value=usage)
        status = result.last_status
        raise CrewBudgetExceededError(
            f"{result.message}. {stopped_or_running(came_of_it)} The task fails without retry, so that no "
            f"retry starts paying again. {self._how_to_raise(budget, status)}"
        )

    def _refuse_over_budget(
        self, hook: CrewHook, execution_id: str, status: CrewStatus | None = None
    ) -> None:
        """Before a ``POST /resume``: a resume continues from what the execution already spent, so one at
        its cap is not resumed (the resume operator and a review round call this). ``status``: one the
        caller read right before, else it is read here."""
        budget = self._task_budget(hook.config)
        if budget is None or not budget.capped:
            return
        status = hook.get_status(execution_id) if status is None else status
        if budget.over(status.usage):
            state = status.raw_state or status.state.value
            raise CrewBudgetExceededError(
                f"Crew execution {execution_id} already spent {budget.describe_spent(status.usage)}, its "
                f"budget ({budget.describe_caps()}): it is not resumed, and nothing was sent. It stays "
                f"{state} at the service. {self._how_to_raise(budget, status)}"
            )

    def _how_to_raise(self, budget: Budget | None, status: CrewStatus | None) -> str:
        """Where to raise the cap ``status`` reached: the task's own, or the connection's default."""
        cap = budget.cap_reached(status.usage if status is not None else None) if budget else "tokens"
        parameter = "max_tokens" if cap == "tokens" else "max_cost"
        if cap_value(getattr(self, parameter), parameter) is not None:
            return f"To let it spend more, raise the task's {parameter}."
        extra = "max_usage" if cap == "tokens" else "max_cost"
        label = "Max tokens per execution" if cap == "tokens" else "Max cost per execution"
        return (
            f"To let it spend more, set the task's {parameter}, or raise '{label}' (extra '{extra}') on "
            f"connection {self.crew_conn_id!r}."
        )

    def _note_silent_event_stream(self, kickoff_id: str, context: Context | None) -> None:
        """At a failure found by a status poll: when this task subscribed to the crew's event stream and
        no event of it was kept, say so (the service may not send events: docs/webhook-wake.md)."""
        if context is None or not self.subscribes_to_events:
            return
        from airflow_provider_crew.crew_events import XCOM_CREW_EVENTS  # its models: not at DAG parse

        try:
            known = self.crew_execution.config if self.crew_execution is not None else None
            if not (known or CrewHook(crew_conn_id=self.crew_conn_id).config).event_stream:
                return
            ti = context["ti"]
            kept = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_CREW_EVENTS, map_indexes=ti.map_index)
        except Exception:  # only a note: a failure to read it must not change how the task ends
            return
        if kept is None:
            self.log.warning(
                "No event came from the crew's event stream for execution %s, although the connection "
                "subscribes to it (event_stream): the crew service may not send events. Its end was "
                "found by a status read.",
                kickoff_id,
            )

    def _prices(self) -> Prices | None:
        """The connection's prices, which give the ``usage`` XCom its cost (None: none, or unreadable)."""
        budget = self._optional_budget()
        return budget.prices if budget is not None else None

    def _optional_budget(self) -> Budget | None:
        """:meth:`_task_budget`, or None when the connection cannot be read (it prices what is pushed)."""
        try:
            return self._task_budget()
        except Exception as error:
            self.log.warning("Could not read connection %r for the budget: %s", self.crew_conn_id, error)
            return None

    def on_kill(self) -> None:
        """Airflow kills the task while it waits (``execution_timeout``, a user marking it failed or
        success or clearing it, a worker shutting down): stop the execution, unless the task lives on.

        A time-out says so itself; otherwise the task instance's state tells: still running (a worker
        going away, a lost heartbeat) or up for retry, its retry reattaches, so nothing is stopped.
        The process may be killed 5 s after Airflow asked, and this may run in a signal handler while
        the task talks to Airflow, so the work runs in a thread and is given at most
        :data:`ON_KILL_SECONDS`.
        """
        waiting = self._waiting
        if waiting is None or not self._stops_crew():
            return
        kickoff_id, context, config = waiting
        timed_out = is_task_timeout(sys.exc_info()[1])

        def stop() -> None:
            reason = stopping.EXECUTION_TIMEOUT if timed_out else self._kill_reason(kickoff_id, context)
            if reason is not None:
                self._stop_execution(
                    kickoff_id, reason, config, context, patience=ON_KILL_SECONDS - ON_KILL_STATE_SECONDS
                )

        worker = threading.Thread(target=stop, name="crew-stop", daemon=True)
        worker.start()
        worker.join(ON_KILL_SECONDS)

    def _kill_reason(self, kickoff_id: str, context: Context) -> str | None:
        """Why to stop the execution of a killed task, from its state; None to leave it running."""
        ti = context["ti"]
        state: list[str | None] = []
        problem: list[BaseException] = []

        def ask() -> None:
            try:
                state.append(
                    task_instance_state(ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1))
                )
            except Exception as error:  # the supervisor is gone, or does not answer
                problem.append(error)

        query = threading.Thread(target=ask, name="crew-task-state", daemon=True)
        query.start()
        query.join(ON_KILL_STATE_SECONDS)
        if not state:
            why = repr(problem[0]) if problem else f"no answer within {ON_KILL_STATE_SECONDS:g} s"
            self.log.info(
                "Not stopping crew execution %s: its task's state is unknown (%s).", kickoff_id, why
            )
            return None
        reason = stopping.reason_for_state(state[0], deferred=False)
        if reason is None:
            self.log.info(
                "Not stopping crew execution %s: the task is %s, so a retry will reattach to it.",
                kickoff_id,
                state[0],
            )
        return reason

    def _stop_cut_off_wait(self, kickoff_id: str, reason: str, context: Context | None = None) -> str | None:
        """Stop the execution whose wait this task ends without the crew (its timeout, say).

        :return: What came of it, for the task's error (None when this task does not stop it).
        """
        waiting = self._waiting
        if not self._stops_crew():
            if self.owns_execution:  # stop_crew=False: the execution this task owned runs on
                metrics.count("crew.execution.left_running", **metrics.task_tags(self), why="stop_disabled")
            return None
        try:
            if waiting is not None and waiting[0] == kickoff_id:
                _, context, config = waiting
            else:  # resumed after a deferral: read the connection again
                config = CrewHook(crew_conn_id=self.crew_conn_id).config
            return self._stop_execution(kickoff_id, reason, config, context)
        except Exception as error:  # the task's own error follows: a failed stop must not hide it
            self.log.warning("Could not stop crew execution %s (%s): %s", kickoff_id, reason, error)
            return f"the stop failed ({error})"

    def _stop_execution(
        self,
        kickoff_id: str,
        reason: str,
        config: CrewConnectionConfig,
        context: Context | None,
        *,
        patience: float = STOP_PATIENCE_SECONDS,
    ) -> str:
        """:func:`~airflow_provider_crew.hooks.stop.stop`, and what the status XCom and the lineage
        facets say of it; returns what came of it."""
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        hook.__dict__["config"] = config  # no lookup: this may run while the task is being killed
        owner = metrics.task_tags(self)
        result = stop(hook, kickoff_id, reason, self.log, patience=patience, owner=owner)
        if result is None:
            return "not stopped (see the log)"
        followed = self.crew_execution or FollowedExecution(kickoff_id=kickoff_id)
        followed.stopped = {"reason": reason, "answer": result.outcome.value}
        self.crew_execution = followed
        if context is not None:
            self._after_stop(context, kickoff_id, followed.stopped)
        return result.describe()

    def _after_stop(self, context: Context, kickoff_id: str, stopped: dict[str, str]) -> None:
        """Say in XCom ``status`` that the execution was stopped (best effort: the task may be dying)."""
        result = self.crew_execution.result if self.crew_execution is not None else None
        status = result.last_status if result is not None else None
        last = record_without_output(status) if status is not None else {}
        try:
            context["ti"].xcom_push(key=XCOM_STATUS, value={**last, "stopped": stopped})
        except Exception as error:
            self.log.warning("Could not record the stop of crew execution %s in XCom: %s", kickoff_id, error)


def read_before_deferring(poller: Poller, read: Callable[[], WaitResult | float]) -> WaitResult | float:
    """Read the status (``read``) before a wait defers, and, for a capped wait, read on in the worker
    while its cap may come within a deferral's gap (:data:`~.budget.DEFERRAL_GAP_SECONDS`: the worker's
    exit, the scheduler, a triggerer starting the trigger and its first connection lookup), when nobody
    reads and the crew spends on: until the spending rate is known (at most that gap), and on to the cap
    when it is nearer than that. Returns the last read's step."""
    step = read()
    pace = poller.pace
    learning_until = time.time() + DEFERRAL_GAP_SECONDS
    while (
        isinstance(step, float)
        and pace is not None
        and pace.cap_within(DEFERRAL_GAP_SECONDS, learning=time.time() < learning_until)
    ):
        time.sleep(step)
        step = read()
    return step


def stopped_or_running(came_of_it: str | None) -> str:
    """What a time-out's error says of the execution: what its stop came to, or that it runs on."""
    if came_of_it is None:
        return "The execution was not stopped (stop_crew) and may still be running."
    return f"Stopping the execution: {came_of_it}."
