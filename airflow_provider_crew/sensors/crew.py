"""CrewStatusSensor: waits for a crew execution to finish, or to pause for human input."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowSensorTimeout, PokeReturnValue

from airflow_provider_crew._compat import BaseSensorOperator, default_deferrable
from airflow_provider_crew.exceptions import CrewConfigurationError, CrewError, CrewNotFoundError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.operators._wait import CrewWaitMixin, seconds
from airflow_provider_crew.waiting import (
    DEFAULT_MAX_POLL_INTERVAL,
    DEFAULT_NOT_FOUND_GRACE,
    DEFAULT_POLL_INTERVAL,
    Outcome,
    StateChangeLogger,
    WaitFor,
    WaitResult,
    is_permanent,
    not_found_message,
    outcome_of,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class CrewStatusSensor(CrewWaitMixin, BaseSensorOperator):
    """
    Wait for a crew execution to complete, or to pause for human input.

    Success returns the final output (or, when waiting for human input, the paused task's
    ``execution_id``, ``task_id`` and ``task_output``); an execution that ends FAILED or REVOKED fails
    the sensor with the service's error text; an id that stays 404 beyond ``not_found_grace`` fails
    with "not found". ``timeout``, ``poke_interval``, ``mode`` and ``soft_fail`` work as on every sensor.

    :param kickoff_id: The execution to watch (templated; usually ``kickoff.output``).
    :param crew_conn_id: The ``crew`` connection.
    :param wait_for: ``"completion"`` (default) or ``"human_input"``: also stop at the next pause.
    :param deferrable: Wait in the triggerer instead of holding a worker slot.
    :param max_poll_interval: Deferrable mode polls from ``poke_interval`` up to this, with jitter.
    :param not_found_grace: Seconds after the sensor starts during which a 404 counts as "queued".
    """

    template_fields: Sequence[str] = ("kickoff_id",)
    ui_color = "#d8e8fd"

    def __init__(
        self,
        *,
        kickoff_id: str | Any,
        crew_conn_id: str = CrewHook.default_conn_name,
        wait_for: str = WaitFor.COMPLETION.value,
        deferrable: bool = default_deferrable(),
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        not_found_grace: float = DEFAULT_NOT_FOUND_GRACE,
        poke_interval: float = DEFAULT_POLL_INTERVAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.kickoff_id = kickoff_id
        self.crew_conn_id = crew_conn_id
        self.wait_for_target = WaitFor.parse(wait_for)
        self.deferrable = deferrable
        self.poll_interval = seconds(self.poke_interval, "poke_interval")
        self.max_poll_interval = seconds(max_poll_interval, "max_poll_interval")
        self.not_found_grace = seconds(not_found_grace, "not_found_grace")
        self._log_state_change: StateChangeLogger | None = None

    def _checked_kickoff_id(self) -> str:
        if not isinstance(self.kickoff_id, str) or not self.kickoff_id.strip():
            raise CrewConfigurationError(
                f"kickoff_id rendered to {self.kickoff_id!r}; it must be a non-empty id."
            )
        return self.kickoff_id.strip()

    def execute(self, context: Context) -> Any:
        kickoff_id = self._checked_kickoff_id()
        if not self.deferrable:
            return super().execute(context)
        result = self._wait(
            context,
            kickoff_id,
            wait_for=self.wait_for_target,
            timeout=float(self.timeout),
            not_found_grace=self.not_found_grace,
        )
        return self._done(context, kickoff_id, result).xcom_value  # over before it needed deferring

    def poke(self, context: Context) -> bool | PokeReturnValue:
        kickoff_id = self._checked_kickoff_id()
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        try:
            status = hook.get_status(kickoff_id)
        except CrewNotFoundError as error:
            if self._seconds_since_start(context) < self.not_found_grace:
                self.log.info(
                    "Crew execution %s not visible yet (404); still within the grace period.", kickoff_id
                )
                return False
            return self._done(
                context,
                kickoff_id,
                WaitResult(outcome=Outcome.NOT_FOUND, message=not_found_message(kickoff_id, error)),
            )
        except CrewError as error:
            if is_permanent(error):
                raise
            self.log.warning("Polling crew execution %s failed (%s); will poll again.", kickoff_id, error)
            return False
        if self._log_state_change is None:
            self._log_state_change = StateChangeLogger(self.log, kickoff_id)
        self._log_state_change(status)
        outcome = outcome_of(status, self.wait_for_target)
        if outcome is None:
            return False
        return self._done(
            context, kickoff_id, WaitResult(outcome=outcome, message=status.describe(), status=status)
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        kickoff_id, result = self._result_from_event(event)
        if result.outcome is Outcome.TIMEOUT:
            raise AirflowSensorTimeout(result.message)  # soft_fail turns this into a skip
        return self._done(context, kickoff_id, result).xcom_value

    def _done(self, context: Context, kickoff_id: str, result: WaitResult) -> PokeReturnValue:
        self._raise_for_outcome(kickoff_id, result)
        return PokeReturnValue(is_done=True, xcom_value=self._push_result(context, kickoff_id, result))

    @staticmethod
    def _seconds_since_start(context: Context) -> float:
        # The TI's start date survives reschedule mode, where instance attributes do not.
        started = getattr(context["ti"], "start_date", None)
        if not isinstance(started, datetime):
            return 0.0
        if started.tzinfo is None:
            started = started.replace(tzinfo=timezone.utc)
        return (datetime.now(timezone.utc) - started).total_seconds()
