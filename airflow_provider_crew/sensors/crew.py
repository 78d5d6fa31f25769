"""CrewStatusSensor: waits for a crew execution to finish, or to pause for human input."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowSensorTimeout, PokeReturnValue

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import BaseSensorOperator
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.links.crew import CrewExecutionLink
from airflow_provider_crew.openlineage import CrewOpenLineageMixin
from airflow_provider_crew.operators.base import (
    CrewTaskParameters,
    checked_kickoff_id,
    default_deferrable,
    required_kickoff_id,
    seconds,
    upstream_task_id,
)
from airflow_provider_crew.operators.wait import DEFAULT_TIMEOUT, CrewWaitMixin
from airflow_provider_crew.operators.wait_stop import (
    BUDGET_TEMPLATE_FIELDS,
    checked_stop_crew,
    stopped_or_running,
)
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.end_metrics import wait_ended
from airflow_provider_crew.waiting.rules import (
    DEFAULT_MAX_POLL_INTERVAL,
    DEFAULT_NOT_FOUND_GRACE,
    DEFAULT_POLL_INTERVAL,
    OnHumanInput,
    Outcome,
    Poller,
    WaitResult,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


def one_poll_interval(poll_interval: timedelta | float, poke_interval: timedelta | float | None) -> float:
    """The sensor's poll interval in seconds, given as ``poll_interval`` or as Airflow's ``poke_interval``."""
    interval = seconds(poll_interval, "poll_interval")
    if poke_interval is None:
        return interval
    poke = seconds(poke_interval, "poke_interval")
    if interval not in (poke, DEFAULT_POLL_INTERVAL):
        raise CrewConfigurationError(
            f"poll_interval={poll_interval!r} and poke_interval={poke_interval!r} name the same setting "
            "of CrewStatusSensor (seconds between status polls); give one of them."
        )
    return poke


class CrewStatusSensor(CrewOpenLineageMixin, CrewWaitMixin, CrewTaskParameters, BaseSensorOperator):
    """
    Wait for a crew execution to finish, or to pause for human input.

    An execution that ends FAILED or REVOKED fails the sensor with the service's error text. An id
    that stays 404 beyond ``not_found_grace`` fails with "not found": services answer 404 for a
    queued execution for a few seconds. ``mode``, ``soft_fail`` and the other arguments of Airflow's
    sensors work as on every sensor; ``timeout`` and ``poll_interval`` mean what they mean on every
    crew task, with the same defaults (24 hours, 2 s). Like every crew task, the sensor returns the
    kickoff id; the final output is XCom ``result`` (``sensor.output["result"]``).

    The parameters crew tasks share mean the same on each, as docs/api.md says once ("The same words
    on every task"): ``crew_conn_id``, ``kickoff_task_id``, ``on_human_input``, ``deferrable``,
    ``openlineage_include_values``, ``stop_crew``; ``poll_interval``, ``max_poll_interval`` and
    ``timeout`` too, with what a sensor adds to them below.

    :param kickoff_id: The execution to watch: the kickoff id, usually ``kickoff.output``.
    :param poll_interval: Seconds before the first status poll; later intervals grow with jitter up
        to ``max_poll_interval`` (in poke and reschedule mode, the seconds between pokes). Airflow's
        ``poke_interval`` is another name for it here: give one of them.
    :param max_poll_interval: Longest interval between status polls, in seconds (deferrable; in poke
        and reschedule mode Airflow spaces the pokes ``poll_interval`` apart, growing them only with
        its ``exponential_backoff``).
    :param timeout: How long to wait, in seconds or as a timedelta: Airflow's sensor ``timeout``.
        Passing it fails the task (``soft_fail`` skips it); the execution is stopped only with
        ``stop_crew=True``.
    :param not_found_grace: Seconds after the kickoff during which a 404 counts as "queued", as
        long as the service has not answered for the execution yet (docs/contract.md, "404 right
        after kickoff").
    :param poke_interval: Airflow's name for ``poll_interval`` on sensors; give one of the two.

    :xcom return_value:
    :xcom result:
    :xcom human_input:
    :xcom usage:
    :xcom status:
    :xcom execution_url:
    """

    template_fields: Sequence[str] = ("kickoff_id", *BUDGET_TEMPLATE_FIELDS)
    owns_execution = False  # it watches an execution another task started: stopped only when asked
    ui_color = "#d8e8fd"
    operator_extra_links = (CrewExecutionLink(),)

    def __init__(
        self,
        *,
        kickoff_id: str | Any,
        crew_conn_id: str = CrewHook.default_conn_name,
        on_human_input: str = OnHumanInput.RETURN.value,
        deferrable: bool = default_deferrable(),
        poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        not_found_grace: float = DEFAULT_NOT_FOUND_GRACE,
        kickoff_task_id: str | None = None,
        openlineage_include_values: bool = False,
        poke_interval: timedelta | float | None = None,
        stop_crew: bool | None = None,
        max_tokens: int | str | None = None,
        max_cost: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        interval = one_poll_interval(poll_interval, poke_interval)
        super().__init__(poke_interval=interval, timeout=seconds(timeout, "timeout"), **kwargs)
        self.kickoff_id = required_kickoff_id(kickoff_id, "the execution to watch")
        self.crew_conn_id = crew_conn_id
        self.on_human_input = OnHumanInput.parse(on_human_input)
        self.deferrable = deferrable
        self.poll_interval = interval
        self.max_poll_interval = seconds(max_poll_interval, "max_poll_interval")
        self.not_found_grace = seconds(not_found_grace, "not_found_grace")
        self.kickoff_task_id = kickoff_task_id or upstream_task_id(kickoff_id)
        self.openlineage_include_values = openlineage_include_values
        self.stop_crew = checked_stop_crew(stop_crew)
        self._set_budget(max_tokens, max_cost)
        # One wait's state across the pokes of one task try (poke mode keeps this instance).
        self._poke_poller: tuple[tuple[str, Any], Poller] | None = None

    def execute(self, context: Context) -> Any:
        kickoff_id = checked_kickoff_id(self.kickoff_id)
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        self._follow_execution(context, hook, kickoff_id)  # the execution link and lineage
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout:
                self._stop_cut_off_wait(kickoff_id, stopping.WAIT_TIMEOUT, context)
                raise
        result = self._wait(
            context,
            kickoff_id,
            wait_for=self.on_human_input.wait_for,
            timeout=float(self.timeout),
            not_found_grace=self.not_found_grace,
            hook=hook,
        )
        return self._done(context, kickoff_id, result).xcom_value  # over before it needed deferring

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """One poll, decided by the same rules as the deferred and blocking waits."""
        kickoff_id = checked_kickoff_id(self.kickoff_id)
        poller = self._poller_for_pokes(context, kickoff_id)
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        self._waiting = (kickoff_id, context, hook.config)  # what on_kill stops, when asked to
        step = poller.poll(lambda: hook.get_status(kickoff_id))
        if isinstance(step, WaitResult):
            wait_ended(metrics.task_tags(context["ti"]), step, poller)
            return self._done(context, kickoff_id, step)
        return False  # the sensor's poke_interval and timeout govern the next poke

    def _poller_for_pokes(self, context: Context, kickoff_id: str) -> Poller:
        """The wait's state: kept across pokes in poke mode; in reschedule mode each poke is a new
        process and builds it again (the 404 grace still counts from the kickoff, not from the poke)."""
        key = (kickoff_id, getattr(context["ti"], "try_number", None))
        if self._poke_poller is None or self._poke_poller[0] != key:
            poller = Poller(
                kickoff_id,
                wait_for=self.on_human_input.wait_for,
                deadline=math.inf,  # BaseSensorOperator enforces `timeout` between pokes
                not_found_deadline=self._not_found_deadline(context, kickoff_id, self.not_found_grace),
                poll_interval=self.poll_interval,
                max_poll_interval=self.max_poll_interval,
                log=self.log,
                budget=self._task_budget(),
            )
            self._poke_poller = (key, poller)
        return self._poke_poller[1]

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        kickoff_id, result = self._result_from_event(context, event)
        if result.outcome is Outcome.TIMEOUT:
            came_of_it = self._stop_cut_off_wait(kickoff_id, stopping.WAIT_TIMEOUT, context)
            # soft_fail turns this into a skip
            raise AirflowSensorTimeout(f"{result.message} {stopped_or_running(came_of_it)}")
        return self._done(context, kickoff_id, result).xcom_value

    def _done(self, context: Context, kickoff_id: str, result: WaitResult) -> PokeReturnValue:
        return PokeReturnValue(is_done=True, xcom_value=self._finish_wait(context, kickoff_id, result))

    def _wait_started_at(self, context: Context) -> float:
        if self.reschedule:
            # Each reschedule runs the task anew with a new start date; Airflow keeps the first.
            first = context["ti"].get_first_reschedule_date(context)
            if first is not None:
                return float(first.timestamp())
        return super()._wait_started_at(context)
