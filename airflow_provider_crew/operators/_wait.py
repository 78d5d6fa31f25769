"""What the kickoff and resume operators and the status sensor share: starting a wait (deferred or
blocking), validating the trigger's event, and turning the outcome into XCom values or an error."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_crew.exceptions import (
    CrewConfigurationError,
    CrewError,
    CrewExecutionFailedError,
    CrewExecutionNotFoundError,
    CrewExecutionTimeoutError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.models import CrewStatus
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
XCOM_OUTPUT = "output"
XCOM_STATUS = "status"
XCOM_HUMAN_INPUT = "human_input"
XCOM_WEBHOOKS = "webhooks"
XCOM_RESUME = "resume"


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


def paused_task(status: CrewStatus, kickoff_id: str) -> dict[str, Any]:
    """What a reviewer needs to resume: the XCom value handed downstream on a pause."""
    return {
        "execution_id": kickoff_id,
        "task_id": status.paused_task_id,
        "task_output": status.paused_task_output,
    }


class CrewWaitMixin:
    """Waiting for an execution from an operator or sensor; expects BaseOperator underneath."""

    crew_conn_id: str
    poll_interval: float
    max_poll_interval: float
    deferrable: bool
    log: Any

    def _wait(
        self,
        context: Context,
        kickoff_id: str,
        *,
        wait_for: WaitFor,
        timeout: float,
        not_found_grace: float = DEFAULT_NOT_FOUND_GRACE,
        hook: CrewHook | None = None,
    ) -> WaitResult:
        """Wait for the execution; when deferrable this defers and resumes in ``execute_complete``."""
        now = time.time()
        deadline = now + timeout
        not_found_deadline = now + not_found_grace
        hook = hook or CrewHook(crew_conn_id=self.crew_conn_id)
        poller = Poller(
            kickoff_id,
            wait_for=wait_for,
            deadline=deadline,
            not_found_deadline=not_found_deadline,
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
                    not_found_deadline=not_found_deadline,
                    poll_interval=self.poll_interval,
                    max_poll_interval=self.max_poll_interval,
                ),
                method_name="execute_complete",
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
            status = result.status
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
        status = result.status
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
