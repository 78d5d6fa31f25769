"""Waiting for an execution from a task: read once, then defer to the trigger or poll in the worker.

Every crew task that waits (the kickoff, resume and review operators and the status sensor) does
it through :class:`CrewWaitMixin`:

1. :meth:`~CrewWaitMixin._follow_execution` once the execution is known: push its page URL (the
   task's "Crew execution" link) and keep what the link and OpenLineage read later;
2. :meth:`~CrewWaitMixin._wait`: read the status once in the worker; when the wait is not over,
   defer to :class:`~airflow_provider_crew.triggers.crew.CrewStatusTrigger` (deferrable) or poll in
   the worker; both follow :mod:`airflow_provider_crew.waiting.rules`;
3. after a deferral, :meth:`~CrewWaitMixin._result_from_event` checks the trigger's event;
4. :meth:`~CrewWaitMixin._end_wait` keeps the result (:class:`~.rules.FollowedExecution`) and raises
   for the outcomes that fail the task; :meth:`~CrewWaitMixin._push_result` pushes the rest to XCom.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import has_post_execute, running_in_process_test, task_success_listeners
from airflow_provider_crew.exceptions import (
    CrewError,
    CrewExecutionFailedError,
    CrewExecutionNotFoundError,
    CrewExecutionPausedError,
    CrewExecutionTimeoutError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.links.crew import push_execution_url
from airflow_provider_crew.operators.base import name_execution_in_asset_events, seconds
from airflow_provider_crew.operators.wait_stop import CrewStopMixin, read_before_deferring, stopped_or_running
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.end_metrics import wait_ended
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.race import deferral_settle_seconds, race_hold_enabled
from airflow_provider_crew.waiting.rules import (
    DEFAULT_NOT_FOUND_GRACE,
    FollowedExecution,
    OnHumanInput,
    Outcome,
    Poller,
    WaitFor,
    WaitResult,
    wait_blocking,
)
from airflow_provider_crew.waiting.xcom import (
    XCOM_KICKED_OFF_AT,
    crew_output,
    crew_partial,
    end_log_line,
    epoch_seconds,
    result_xcoms,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_crew.hooks.webhook_receiver import WakeAddresses

# The trigger and the webhook receiver are imported where a task defers: a DAG file that only
# builds crew tasks does not pay for Airflow's trigger machinery at every parse (about 8 ms).

#: What a crew task adds to its serialized form, for the Crew tab in the api-server.
SERIALIZED_FOR_THE_UI = frozenset({"crew_conn_id", "poll_interval", "max_poll_interval"})

DEFAULT_TIMEOUT = timedelta(hours=24)
#: The ``next_kwargs`` key that carries the execution's page URL through a deferral or a park.
EXECUTION_URL_KWARG = "crew_execution_url"


def kicked_off_at_from_xcom(context: Context, kickoff_task_id: str, kickoff_id: str) -> float | None:
    """When ``kickoff_task_id`` started ``kickoff_id`` (epoch seconds), or None when it did not say."""
    pulled = context["ti"].xcom_pull(task_ids=kickoff_task_id, key=XCOM_KICKED_OFF_AT)
    for record in pulled if isinstance(pulled, list) else [pulled]:
        if isinstance(record, dict) and record.get("kickoff_id") == kickoff_id:
            return epoch_seconds(record)
    return None


def task_started_at(context: Context) -> float:
    """When this task try started (epoch seconds); a deferral keeps it, so resuming does not move it."""
    started = getattr(context["ti"], "start_date", None)
    if not isinstance(started, datetime):
        return time.time()
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    return started.timestamp()


class CrewWaitMixin(CrewStopMixin):
    """Waiting for an execution from an operator or sensor; expects BaseOperator underneath.

    ``crew_execution`` is what the task followed and how its wait ended: the "Crew execution" link
    and the OpenLineage facets read it, in the task's own process.

    The texts of the wait's parameters every crew task shares (the others: ``CrewTaskParameters``):

    :param deferrable: Wait in the triggerer instead of holding a worker slot. The default is
        Airflow's ``[operators] default_deferrable``.
    :param poll_interval: Seconds before the first status poll; later intervals grow with jitter
        up to ``max_poll_interval``.
    :param max_poll_interval: Longest interval between status polls, in seconds.

    The XCom keys of every crew task that waits (its docstring names those it pushes; docs/api.md
    shows each text once):

    :xcom return_value: The kickoff id.
    :xcom result: When the wait ends with the execution finished: its final output, a ``dict``
        when the crew returns structured output (``result_json``), else a string; stored here only.
        ``None`` when the wait ends at a pause or the task does not wait (not pushed: pulling it, or
        ``task.output["result"]``, gives ``None``; of a mapped task, a list by map index).
    :xcom human_input: When the wait ends at a pause (``on_human_input="return"``, or ``"fail"``,
        which pushes it before failing): ``{"execution_id", "task_id", "task_output"}`` of the paused
        crew task. ``None`` when the wait ends with the execution finished, or the task does not wait.
    :xcom usage: When the execution finished, or was stopped over its budget: its token counts in the
        shape of ``common.ai``'s ``usage`` XCom (``input_tokens``, ``output_tokens``, ``total_tokens``,
        ``requests``...), and its ``cost`` from the connection's prices (None without prices).
        ``None`` at a pause, without waiting, or when the service reports no token counts.
    :xcom status: When waiting: the last status record, as the service sent it, less the outputs
        another key holds once: at the end the final output (``result``, ``result_json``, and the last
        task's ``output`` when it is that output), in ``result``; at a pause the paused task's output,
        in ``human_input``. ``None`` without waiting.
    :xcom execution_url: The execution's page, when the connection has an execution page URL
        template; pushed as soon as the task knows the execution, before it waits or sends anything
        more. The task's "Crew execution" link opens it.
    """

    crew_conn_id: str
    on_human_input: OnHumanInput = OnHumanInput.RETURN
    poll_interval: float
    max_poll_interval: float
    deferrable: bool
    log: Any
    crew_execution: FollowedExecution | None = None

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        """Airflow's serialized fields plus the connection and the poll pace: the api-server's Crew tab
        reads them from the serialized DAG to follow a running execution (plugins/crew_views.py)."""
        return super().get_serialized_fields() | SERIALIZED_FOR_THE_UI  # type: ignore[misc]

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """Airflow's ``partial``; the mapped task it expands to reads its keys by map index too."""
        return crew_partial(super().partial(**kwargs))  # type: ignore[misc]

    @property
    def output(self) -> Any:
        """This task's XComArg: a key its wait's end may leave out (``result``, ``human_input``,
        ``usage``, ``status``) resolves to None when absent, as ``xcom_pull`` gives it."""
        return crew_output(self)

    # -- the execution this task follows -----------------------------------------------------------

    def _follow_execution(self, context: Context, hook: CrewHook, kickoff_id: str) -> None:
        """Keep the execution this task follows, and push its page URL for the extra link.

        Call it as soon as the execution is known, before waiting or deferring.
        """
        url = push_execution_url(context, hook.config, kickoff_id)
        self.crew_execution = FollowedExecution(kickoff_id, config=hook.config, url=url, url_known=True)

    def known_execution_url(self) -> tuple[bool, str | None]:
        """Whether this run knows the execution's page URL, and the URL (None: there is none).

        At the end of each run of a task (each deferral included) the worker asks the task's extra
        link for its URL. Reading it from XCom when none was pushed (no template) makes Airflow log an
        "XCom not found" error in every crew task, so the task keeps what it knows and carries it
        through a deferral in ``next_kwargs``; the link reads XCom only when neither is there.
        """
        followed = self.crew_execution
        return (True, followed.url) if followed is not None and followed.url_known else (False, None)

    def _resume_kwargs(self, kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """``kwargs`` for a deferral or a park, plus the execution's page URL when it is known."""
        carried = dict(kwargs or {})
        known, url = self.known_execution_url()
        if known:
            carried[EXECUTION_URL_KWARG] = url
        return carried

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Take the carried page URL out of ``next_kwargs``, then resume as Airflow does."""
        if next_kwargs and EXECUTION_URL_KWARG in next_kwargs:
            next_kwargs = dict(next_kwargs)
            url = next_kwargs.pop(EXECUTION_URL_KWARG)
            self.crew_execution = FollowedExecution(url=url, url_known=True)
        return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]

    # -- the wait -----------------------------------------------------------------------------------

    def _set_wait_timing(
        self,
        *,
        poll_interval: timedelta | float,
        max_poll_interval: timedelta | float,
        timeout: timedelta | float,
    ) -> None:
        """Check and keep ``poll_interval``, ``max_poll_interval`` and ``timeout`` (in seconds)."""
        # An unknown ``[crew] deferral_race_hold`` fails here, at DAG parse, before a task starts anything
        # (at its deferral it would fail after the kickoff or resume was sent).
        race_hold_enabled()
        self.poll_interval = seconds(poll_interval, "poll_interval")
        self.max_poll_interval = seconds(max_poll_interval, "max_poll_interval")
        self.timeout = seconds(timeout, "timeout")

    def _wait_started_at(self, context: Context) -> float:
        """When this task began waiting, for the 404 grace when the kickoff time is unknown."""
        return task_started_at(context)

    def _not_found_deadline(
        self, context: Context, kickoff_id: str, grace: float, kicked_off_at: float | None = None
    ) -> float:
        """Until when a 404 counts as a fresh kickoff not visible yet: the kickoff time plus ``grace``.

        The kickoff time is ``kicked_off_at`` when given, else the kickoff task's XCom
        ``kicked_off_at`` (found through ``kickoff_task_id``), else when this task began waiting.
        """
        if kicked_off_at is None:
            kickoff_task_id = getattr(self, "kickoff_task_id", None)
            if kickoff_task_id:
                kicked_off_at = kicked_off_at_from_xcom(context, kickoff_task_id, kickoff_id)
        if kicked_off_at is None:
            kicked_off_at = self._wait_started_at(context)
        # Not later than now: another machine's clock may run ahead of this one.
        return min(kicked_off_at, time.time()) + grace

    def _wait(
        self,
        context: Context,
        kickoff_id: str,
        *,
        wait_for: WaitFor,
        timeout: float,
        not_found_grace: float = DEFAULT_NOT_FOUND_GRACE,
        kicked_off_at: float | None = None,
        hook: CrewHook | None = None,
    ) -> WaitResult:
        """Wait for the execution; when deferrable this defers and resumes in ``execute_complete``.

        :param kickoff_id: The execution.
        :param wait_for: What ends the wait besides failure.
        :param timeout: Seconds from now.
        :param not_found_grace: Seconds after the kickoff during which a 404 counts as "queued".
        :param kicked_off_at: Epoch seconds of the kickoff, when this task made it.
        :param hook: A hook to reuse.
        """
        deadline = time.time() + timeout
        hook = hook or CrewHook(crew_conn_id=self.crew_conn_id)
        budget = self._task_budget(hook.config)
        if self.crew_execution is not None:
            self.crew_execution.budget = budget
        poller = Poller(
            kickoff_id,
            wait_for=wait_for,
            deadline=deadline,
            not_found_deadline=self._not_found_deadline(context, kickoff_id, not_found_grace, kicked_off_at),
            poll_interval=self.poll_interval,
            max_poll_interval=self.max_poll_interval,
            log=self.log,
            kicked_off_at=kicked_off_at,
            budget=budget,
        )
        task = metrics.task_tags(context["ti"])
        # What on_kill stops while the wait runs here. Kept when the wait raises: Airflow's
        # execution_timeout raises in it, then calls on_kill.
        self._waiting = (kickoff_id, context, hook.config)
        if not self.deferrable:
            result = wait_blocking(poller, lambda kickoff_id: hook.get_status(kickoff_id, deadline=deadline))
            self._waiting = None
            wait_ended(task, result, poller)
            return result
        # Read here first: a wait already over needs no trigger, and a trigger that fires within a
        # scheduler loop of deferring can trip Airflow's stale executor-event race (apache/airflow#67287).
        step = read_before_deferring(poller, lambda: _read_once(poller, hook, task))
        self._waiting = None
        if isinstance(step, WaitResult):
            return step
        self._defer_wait(context, hook, poller)

    def _defer_wait(self, context: Context, hook: CrewHook, poller: Poller) -> NoReturn:
        """Defer to :class:`CrewStatusTrigger` with ``poller``'s absolute deadlines and its sighting of
        the execution: a restarted trigger neither starts the 404 grace again nor forgets that it ended."""
        from airflow_provider_crew.triggers.crew import CrewStatusTrigger

        wake = self._webhook_wake(context, hook)
        ends_task = self._trigger_success_outcomes()
        now = time.time()
        not_before = now + deferral_settle_seconds()
        self.defer(  # type: ignore[attr-defined]
            trigger=CrewStatusTrigger(
                kickoff_id=poller.kickoff_id,
                crew_conn_id=self.crew_conn_id,
                wait_for=poller.wait_for.value,
                deadline=poller.deadline,
                not_found_deadline=poller.not_found_deadline,
                execution_seen=poller.execution_seen,
                kicked_off_at=poller.kicked_off_at,
                last_running_at=poller.last_running_at,
                poll_interval=self.poll_interval,
                max_poll_interval=self.max_poll_interval,
                not_before=not_before,
                safety_poll_interval=wake.safety_poll_interval if wake is not None else 0.0,
                ends_task_when_finished=Outcome.SUCCEEDED.value in ends_task,
                ends_task_when_paused=Outcome.PAUSED.value in ends_task,
                # With the webhook wake on, the trigger stops nothing (a wake and a user's action look
                # alike to it), the api-server's listener does (docs/reliability.md).
                stop_crew=self._stops_crew() and hook.config.stop_executions,
                budget=poller.budget.to_kwargs() if poller.budget is not None else None,
                pace=poller.pace.to_kwargs() if poller.pace is not None else None,
            ),
            method_name="execute_complete",
            kwargs=self._resume_kwargs(),
            # A little past the trigger's own deadline, or its race hold when that ends later (a long
            # [core] task_success_overtime): the trigger reports the time-out itself, with the last
            # status it saw; this is the backstop if the triggerer is gone.
            timeout=timedelta(seconds=max(0.0, max(poller.deadline, not_before) - now) + 60),
        )
        raise AssertionError("defer() returned")  # pragma: no cover - defer always raises

    def _trigger_success_outcomes(self) -> list[str]:
        """The outcomes with which the trigger may end this task itself (no worker, no race, no hold).

        Only where nothing needs a worker at a successful end: no ``on_success_callback`` (Airflow
        runs none for a task its trigger ends), no asset ``outlets``, no listener that wants to see the
        task succeed (OpenLineage's COMPLETE event: listeners run in the worker), no ``post_execute``
        hook, ``do_xcom_push`` on (the worker leaves ``return_value`` out otherwise) and not in
        ``dag.test()`` (it runs triggers inline and keeps no XCom of theirs). A pause ends the task
        successfully only with ``on_human_input="return"``. Failures always go to a worker, so that
        retries, failure callbacks and the typed errors work as in a blocking wait.
        """
        if (
            getattr(self, "on_success_callback", None)
            or getattr(self, "outlets", None)
            or has_post_execute(self)
            or not getattr(self, "do_xcom_push", True)
            or running_in_process_test()
            or task_success_listeners()
        ):
            return []
        if self.on_human_input is OnHumanInput.RETURN:
            return [Outcome.SUCCEEDED.value, Outcome.PAUSED.value]
        return [Outcome.SUCCEEDED.value]

    def _result_from_event(self, context: Context, event: Any) -> tuple[str, WaitResult]:
        """Validate the trigger's event (an unknown or missing one fails clearly): kickoff id and result.

        A wake by the crew's webhook is not a result: the status is read here, and the wait ends, or
        defers again with its deadlines unchanged.
        """
        parsed = CrewWaitEvent.parse(event)
        if parsed.outcome is not Outcome.WOKEN:
            return parsed.kickoff_id, parsed.to_result()
        from airflow_provider_crew.triggers.crew import CrewStatusTrigger

        wait = CrewStatusTrigger.from_kwargs(parsed.wait or {})
        self.log.info("%s Reading the status of crew execution %s.", parsed.message, wait.kickoff_id)
        hook = CrewHook(crew_conn_id=wait.crew_conn_id)
        poller = wait.poller(log=self.log)
        step = _read_once(poller, hook, metrics.task_tags(context["ti"]), woken_at=parsed.woken_at)
        if isinstance(step, WaitResult):
            return wait.kickoff_id, step
        self.log.info("Crew execution %s is not over: waiting on, deferred.", wait.kickoff_id)
        self._defer_wait(context, hook, poller)

    # -- the crew's webhooks wake the wait (docs/webhook-wake.md) -----------------------------------

    def _webhook_wake(self, context: Context, hook: CrewHook) -> WakeAddresses | None:
        """This run's webhook addresses, or None (:func:`~.webhook_receiver.wake_for_run`), once a try."""
        if "_crew_wake" not in self.__dict__:
            from airflow_provider_crew.hooks.webhook_receiver import wake_for_run

            self.__dict__["_crew_wake"] = wake_for_run(hook.config, context["ti"], self.log)
        return self.__dict__["_crew_wake"]  # type: ignore[no-any-return]

    def _finish_wait(self, context: Context, kickoff_id: str, result: WaitResult) -> str:
        """End the task's wait the way every crew task ends it: push what it found to XCom (``result``
        or ``human_input``, ``status``, ``usage``) and return the kickoff id; raise for the outcomes
        that fail the task, and for a pause when ``on_human_input`` is ``"fail"``."""
        self._end_wait(kickoff_id, result, context)
        self._push_result(context, kickoff_id, result)
        name_execution_in_asset_events(context, self, kickoff_id, result)
        if result.outcome is Outcome.PAUSED and self.on_human_input is OnHumanInput.FAIL:
            status = result.last_status
            paused = status.paused_task_id if status is not None else None
            raise CrewExecutionPausedError(
                f"Crew execution {kickoff_id} paused for human input on task {paused!r}, and "
                "on_human_input='fail': the task fails without retry, so that no retry starts another "
                "execution. The execution stays paused at the service: resume it with "
                f"CrewResumeOperator(kickoff_id={kickoff_id!r}, ...) or cancel it there. To hand the pause "
                "downstream instead, set on_human_input='return'; to wait for someone to resume it, 'wait'."
            )
        return kickoff_id

    def _end_wait(self, kickoff_id: str, result: WaitResult, context: Context | None = None) -> None:
        """Keep how the wait ended; raise for the outcomes that fail the task (return for succeeded
        and paused). Every way a wait ends (blocking, deferred, sensor poke) passes here."""
        self._keep_result(kickoff_id, result)
        if result.outcome in (Outcome.SUCCEEDED, Outcome.PAUSED):
            return
        if result.outcome is Outcome.FAILED:
            self._note_silent_event_stream(kickoff_id, context)
            status = result.last_status
            word = status.raw_state if status and status.raw_state else "FAILED"
            reason = (status.error if status else None) or result.message
            raise CrewExecutionFailedError(f"Crew execution {kickoff_id} ended {word}: {reason}")
        if result.outcome is Outcome.NOT_FOUND:
            raise CrewExecutionNotFoundError(result.message)
        if result.outcome is Outcome.TIMEOUT:
            came_of_it = self._stop_cut_off_wait(kickoff_id, stopping.WAIT_TIMEOUT, context)
            raise CrewExecutionTimeoutError(f"{result.message} {stopped_or_running(came_of_it)}")
        if result.outcome is Outcome.OVER_BUDGET:
            self._end_over_budget(kickoff_id, result, context)
        raise CrewError(f"Waiting for crew execution {kickoff_id} failed: {result.message}")

    def _keep_result(self, kickoff_id: str, result: WaitResult) -> None:
        followed = self.crew_execution or FollowedExecution()
        followed.kickoff_id, followed.result = kickoff_id, result
        self.crew_execution = followed
        if followed.url_known:
            return
        # Resumed without the URL carried in next_kwargs (``dag.test()`` drops them): the connection
        # says what it is (a lookup in Airflow, not a request to the crew service), so the link
        # need not look for it in XCom.
        try:
            followed.config = followed.config or CrewHook(crew_conn_id=self.crew_conn_id).config
        except Exception:
            self.log.warning("Could not read connection %r for the execution link.", self.crew_conn_id)
            return
        followed.url, followed.url_known = followed.config.execution_url(kickoff_id), True

    def _push_result(self, context: Context, kickoff_id: str, result: WaitResult) -> None:
        """Log the end of the wait and push what it found (:func:`~.rules.result_xcoms`)."""
        self.log.info("%s", end_log_line(kickoff_id, result))
        ti = context["ti"]
        for key, value in result_xcoms(kickoff_id, result, self._prices()).items():
            ti.xcom_push(key=key, value=value)


def _read_once(
    poller: Poller, hook: CrewHook, task: dict[str, str], woken_at: float | None = None
) -> WaitResult | float:
    """One status read in the worker, stepped through the wait's rules, and its metrics."""
    step = poller.poll(lambda: hook.get_status(poller.kickoff_id, deadline=poller.deadline))
    wait_ended(task, step if isinstance(step, WaitResult) else None, poller, woken_at=woken_at)
    return step
