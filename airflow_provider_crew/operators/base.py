"""What every crew task shares (the kickoff, resume and review operators and the status sensor).

Checking the kickoff id, the webhook URLs and the wait's timing, finding when the execution was
kicked off and which webhook addresses a resume sends again, starting a wait (deferred to
:class:`~airflow_provider_crew.triggers.crew.CrewStatusTrigger` or blocking in the worker),
validating the trigger's event, and turning the outcome into XCom values or an error. The rules of
a wait themselves are in :mod:`airflow_provider_crew.waiting`.

Imports go one way: ``operators/crew.py``, ``operators/resume.py``, ``operators/human_review.py``
and ``sensors/crew.py`` import this module; it imports the hook, the trigger and ``waiting``, never
an operator or sensor.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import deferral_settle_seconds
from airflow_provider_crew.exceptions import (
    CrewConfigurationError,
    CrewError,
    CrewExecutionFailedError,
    CrewExecutionNotFoundError,
    CrewExecutionTimeoutError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.models import CrewStatus, check_webhook_url
from airflow_provider_crew.waiting import (
    DEFAULT_NOT_FOUND_GRACE,
    CrewWaitEvent,
    Outcome,
    Poller,
    WaitFor,
    WaitResult,
    wait_blocking,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

OUTPUT_LOG_LIMIT = 2000

# XCom keys, named once: DAG authors pull them by these names.
XCOM_KICKOFF_ID = "kickoff_id"
XCOM_KICKED_OFF_AT = "kicked_off_at"
XCOM_OUTPUT = "output"
XCOM_STATUS = "status"
XCOM_HUMAN_INPUT = "human_input"
XCOM_WEBHOOKS = "webhooks"
XCOM_RESUME = "resume"

DEFAULT_TIMEOUT = timedelta(hours=24)
# The notification webhooks a kickoff gives and a resume must give again (the service forgets them).
WEBHOOK_PARAMETERS = ("task_webhook_url", "step_webhook_url", "crew_webhook_url")


def seconds(value: timedelta | float | int, parameter: str) -> float:
    """A duration given as timedelta or seconds, checked to be positive; errors name the parameter."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CrewConfigurationError(
            f"{parameter} must be a number of seconds or a timedelta, got {value!r}."
        )
    if value <= 0:
        raise CrewConfigurationError(f"{parameter} must be greater than 0 seconds, got {value!r}.")
    return float(value)


def checked_kickoff_id(value: Any, parameter: str = "kickoff_id") -> str:
    """The rendered kickoff id, stripped; an error naming ``parameter`` when it is not a non-empty string.

    :param value: The parameter's value after templates and XComArgs were resolved.
    :param parameter: The parameter's name, for the error.
    """
    if not isinstance(value, str) or not value.strip():
        raise CrewConfigurationError(
            f"{parameter} rendered to {value!r}; it must be the execution's id, a non-empty string "
            "(usually kickoff.output)."
        )
    return value.strip()


def upstream_task_id(value: Any) -> str | None:
    """The task that produces ``value`` when it is an XComArg such as ``kickoff.output``."""
    from airflow.sdk import XComArg

    if isinstance(value, XComArg):
        operator = getattr(value, "operator", None)
        return getattr(operator, "task_id", None)
    return None


def is_template_or_xcom(value: Any) -> bool:
    """Whether ``value`` only gets its final form at task start; it is validated then.

    :param value: A parameter's value as given in the DAG.
    """
    from airflow.sdk import XComArg

    return isinstance(value, XComArg) or (isinstance(value, str) and "{{" in value)


def check_webhook_parameter(value: Any, parameter: str) -> None:
    """Fail, naming ``parameter``, when ``value`` is no http(s) URL. Empty and templated values pass.

    :param value: The webhook URL, None or empty for none.
    :param parameter: The parameter's name, for the error.
    """
    if value is None or value == "" or is_template_or_xcom(value):
        return
    try:
        check_webhook_url(value, parameter)
    except ValueError as error:
        raise CrewConfigurationError(str(error)) from None


def resume_webhook_addresses(
    context: Context,
    execution_id: str,
    *,
    given: dict[str, str | None],
    kickoff_task_id: str | None,
    carry_over: bool,
    log: Any,
) -> dict[str, str | None]:
    """The webhook addresses to send with ``POST /resume``: those given, else the kickoff's.

    The service forgets webhook addresses at resume (docs/contract.md); the kickoff task kept its
    own in XCom (without credentials) so every resume can re-supply them.

    :param execution_id: The execution being resumed.
    :param given: The addresses the resuming task was given, by parameter name (None: not given).
    :param kickoff_task_id: The kickoff task whose XCom ``webhooks`` holds the kickoff's addresses.
    :param carry_over: Whether to fill the addresses not given from the kickoff's.
    :param log: The task's logger.
    """
    if not carry_over or all(given.values()):
        return given
    if not kickoff_task_id:
        log.warning(
            "No kickoff task known for execution %s, so its webhook addresses cannot be carried over: "
            "notifications after this resume go only to the addresses given here (docs/contract.md). "
            "Pass kickoff_task_id, or kickoff_id=kickoff.output.",
            execution_id,
        )
        return given
    kept = context["ti"].xcom_pull(task_ids=kickoff_task_id, key=XCOM_WEBHOOKS)
    if isinstance(kept, list):  # a mapped kickoff pulled from an unmapped task: find ours
        kept = next(
            (item for item in kept if isinstance(item, dict) and item.get("kickoff_id") == execution_id), None
        )
    if not isinstance(kept, dict) or kept.get("kickoff_id") != execution_id:
        log.warning(
            "Task %r kept no webhook addresses for execution %s; notifications after this resume go only "
            "to the addresses given here (docs/contract.md).",
            kickoff_task_id,
            execution_id,
        )
        return given
    carried = {name: given[name] or kept.get(name) for name in WEBHOOK_PARAMETERS}
    log.info(
        "Carrying over the kickoff's webhook addresses for %s",
        ", ".join(name for name in WEBHOOK_PARAMETERS if carried[name] and not given[name]) or "nothing",
    )
    return carried


def paused_task(status: CrewStatus, kickoff_id: str) -> dict[str, Any]:
    """What a reviewer needs to resume: the XCom value handed downstream on a pause."""
    return {
        "execution_id": kickoff_id,
        "task_id": status.paused_task_id,
        "task_output": status.paused_task_output,
    }


def kicked_off_at_record(kickoff_id: str, epoch_seconds: float) -> dict[str, Any]:
    """The XCom ``kicked_off_at`` value. The id is in it so that a wait pulling from a mapped
    kickoff (a list of these) finds its own execution's."""
    return {"kickoff_id": kickoff_id, "epoch_seconds": epoch_seconds}


def kicked_off_at_from_xcom(context: Context, kickoff_task_id: str, kickoff_id: str) -> float | None:
    """When ``kickoff_task_id`` started ``kickoff_id`` (epoch seconds), or None when it did not say."""
    pulled = context["ti"].xcom_pull(task_ids=kickoff_task_id, key=XCOM_KICKED_OFF_AT)
    for record in pulled if isinstance(pulled, list) else [pulled]:
        if isinstance(record, dict) and record.get("kickoff_id") == kickoff_id:
            value = record.get("epoch_seconds")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
    return None


def try_number(context: Context) -> int:
    """This task instance's try number (1 when the context has none, as in ``dag.test()``)."""
    return int(getattr(context["ti"], "try_number", 1) or 1)


def task_started_at(context: Context) -> float:
    """When this task try started (epoch seconds); a deferral keeps it, so resuming does not move it."""
    started = getattr(context["ti"], "start_date", None)
    if not isinstance(started, datetime):
        return time.time()
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    return started.timestamp()


#: The ``next_kwargs`` key that carries the execution's page URL through a deferral or a park.
EXECUTION_URL_KWARG = "crew_execution_url"


class CrewWaitMixin:
    """Waiting for an execution from an operator or sensor; expects BaseOperator underneath."""

    crew_conn_id: str
    poll_interval: float
    max_poll_interval: float
    deferrable: bool
    log: Any
    _execution_url: str | None = None
    _execution_url_known: bool = False

    # -- the execution's page URL, known in every process that runs this task ---------------------
    #
    # At the end of each run of a task (each deferral included) the worker asks the task's extra link
    # for its URL. Reading it from XCom when none was pushed (no template) makes Airflow log an
    # "XCom not found" error in every crew task, so the task keeps what it knows and carries it
    # through a deferral in ``next_kwargs``; the link reads XCom only when neither is there.

    def _remember_execution_url(self, url: str | None) -> str | None:
        """Keep the execution's page URL (None: the connection has no template) for the link."""
        self._execution_url = url
        self._execution_url_known = True
        return url

    def known_execution_url(self) -> tuple[bool, str | None]:
        """Whether this run knows the execution's page URL, and the URL (None: there is none)."""
        return self._execution_url_known, self._execution_url

    def _resume_kwargs(self, kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """``kwargs`` for a deferral or a park, plus the execution's page URL when it is known."""
        carried = dict(kwargs or {})
        if self._execution_url_known:
            carried[EXECUTION_URL_KWARG] = self._execution_url
        return carried

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Take the carried page URL out of ``next_kwargs``, then resume as Airflow does."""
        if next_kwargs and EXECUTION_URL_KWARG in next_kwargs:
            next_kwargs = dict(next_kwargs)
            self._remember_execution_url(next_kwargs.pop(EXECUTION_URL_KWARG))
        return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]

    def _set_wait_timing(
        self,
        *,
        poll_interval: timedelta | float,
        max_poll_interval: timedelta | float,
        timeout: timedelta | float,
    ) -> None:
        """Check and keep ``poll_interval``, ``max_poll_interval`` and ``timeout`` (in seconds).

        :param poll_interval: First seconds between status polls.
        :param max_poll_interval: Longest seconds between status polls.
        :param timeout: How long a wait may take.
        """
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
        poller = Poller(
            kickoff_id,
            wait_for=wait_for,
            deadline=deadline,
            not_found_deadline=self._not_found_deadline(context, kickoff_id, not_found_grace, kicked_off_at),
            poll_interval=self.poll_interval,
            max_poll_interval=self.max_poll_interval,
            log=self.log,
        )
        if self.deferrable:
            # Read the status once here first. A wait that is already over needs no trigger. And a
            # trigger that fires within a scheduler loop of deferring can trip Airflow's stale
            # executor-event race (apache/airflow#67287) and fail the task; after this read the
            # trigger's first poll waits one interval.
            try:
                step = poller.step(hook.get_status(kickoff_id, deadline=deadline))
            except CrewError as error:
                step = poller.step(error)
            if isinstance(step, WaitResult):
                return step
            from airflow_provider_crew.triggers.crew import CrewStatusTrigger

            self.defer(  # type: ignore[attr-defined]
                trigger=CrewStatusTrigger(
                    kickoff_id=kickoff_id,
                    crew_conn_id=self.crew_conn_id,
                    wait_for=wait_for.value,
                    deadline=deadline,
                    # Absolute, and already passed when this read saw the execution: a restarted
                    # trigger neither starts the grace again nor forgets that it ended.
                    not_found_deadline=poller.not_found_deadline,
                    execution_seen=poller.execution_seen,
                    poll_interval=self.poll_interval,
                    max_poll_interval=self.max_poll_interval,
                    not_before=time.time() + deferral_settle_seconds(),
                ),
                method_name="execute_complete",
                kwargs=self._resume_kwargs(),
                # A little past the trigger's own deadline: the trigger reports the time-out itself,
                # with the last status it saw; this is the backstop if the triggerer is gone.
                timeout=timedelta(seconds=timeout + 60),
            )
        return wait_blocking(poller, lambda kickoff_id: hook.get_status(kickoff_id, deadline=deadline))

    @staticmethod
    def _result_from_event(event: Any) -> tuple[str, WaitResult]:
        """Validate the trigger's event (an unknown or missing one fails clearly): kickoff id and result."""
        parsed = CrewWaitEvent.parse(event)
        return parsed.kickoff_id, parsed.to_result()

    def _raise_for_outcome(self, kickoff_id: str, result: WaitResult) -> None:
        """Raise for the outcomes that fail the task; return for succeeded and paused."""
        if result.outcome in (Outcome.SUCCEEDED, Outcome.PAUSED):
            return
        if result.outcome is Outcome.FAILED:
            status = result.last_status
            word = status.raw_state if status and status.raw_state else "FAILED"
            reason = (status.error if status else None) or result.message
            raise CrewExecutionFailedError(f"Crew execution {kickoff_id} ended {word}: {reason}")
        if result.outcome is Outcome.NOT_FOUND:
            raise CrewExecutionNotFoundError(result.message)
        if result.outcome is Outcome.TIMEOUT:
            raise CrewExecutionTimeoutError(result.message)
        raise CrewError(f"Waiting for crew execution {kickoff_id} failed: {result.message}")

    def _push_result(self, context: Context, kickoff_id: str, result: WaitResult) -> Any:
        """Log and push the outcome; return the XCom value for 'output' or 'human_input'."""
        status = result.last_status
        ti = context["ti"]
        if status is not None:
            ti.xcom_push(key=XCOM_STATUS, value=status.raw)
        if result.outcome is Outcome.PAUSED and status is not None:
            value = paused_task(status, kickoff_id)
            self.log.info(
                "Crew execution %s is waiting for human input on task %r. Its output:\n%s",
                kickoff_id,
                status.paused_task_id,
                _truncate(status.paused_task_output),
            )
            ti.xcom_push(key=XCOM_HUMAN_INPUT, value=value)
            return value
        output = status.output if status is not None else None
        self.log.info("Crew execution %s succeeded. Output:\n%s", kickoff_id, _truncate(output))
        ti.xcom_push(key=XCOM_OUTPUT, value=output)
        return output


def _truncate(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= OUTPUT_LOG_LIMIT:
        return text
    return f"{text[:OUTPUT_LOG_LIMIT]}… ({len(text) - OUTPUT_LOG_LIMIT} more characters in XCom)"
