"""The operator that starts a crew execution and, by default, waits for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import BaseOperator
from airflow_provider_crew.connection_form import DEFAULT_RECEIVER_CONN_ID
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.hooks.human_input import check_pause_webhook, human_input_webhook
from airflow_provider_crew.links.crew import CrewExecutionLink
from airflow_provider_crew.openlineage import CrewOpenLineageMixin
from airflow_provider_crew.operators.base import (
    WEBHOOK_PARAMETERS,
    CrewTaskParameters,
    check_webhook_parameter,
    default_deferrable,
    is_template_or_xcom,
    name_execution_in_asset_events,
    refuse_own_crew_webhook,
    try_number,
)
from airflow_provider_crew.operators.paid_post import (
    execution_ended,
    execution_to_reattach,
    forget_execution,
    kickoff_record,
    start_execution,
)
from airflow_provider_crew.operators.wait import (
    DEFAULT_TIMEOUT,
    CrewWaitMixin,
)
from airflow_provider_crew.operators.wait_stop import BUDGET_TEMPLATE_FIELDS, checked_stop_crew
from airflow_provider_crew.waiting.rules import DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, OnHumanInput
from airflow_provider_crew.waiting.xcom import (
    XCOM_KICKED_OFF_AT,
    XCOM_KICKOFF_ID,
    XCOM_WEBHOOKS,
    epoch_seconds,
    kicked_off_at_record,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class CrewKickoffOperator(CrewOpenLineageMixin, CrewWaitMixin, CrewTaskParameters, BaseOperator):
    """
    Start an execution of a deployed crew (``POST /kickoff``) and, by default, wait for it.

    Before starting, the operator checks ``inputs`` against ``GET /inputs`` and names missing or
    unknown keys. Like every crew task, it returns the kickoff id, so ``kickoff_id=kickoff.output``
    works in the sensor and the other operators; what the crew produced is in XCom ``result`` (or
    ``human_input`` at a pause): ``kickoff.output["result"]``.

    A retry never starts a second execution while the first may still run: on Airflow 3.3+ it
    reattaches to it (task state store). Only an execution that ended FAILED (or REVOKED) is started
    anew by a retry: that is what the retry is for.

    The service calls the three notification webhooks with a JSON ``POST`` and, by the contract,
    without credentials. The human-input webhook gets a credential, which comes from an Airflow
    connection so that none sits in DAG code.

    The parameters crew tasks share mean the same on each, as docs/api.md says once ("The same words
    on every task"): ``crew_conn_id``, the webhook addresses (``task_webhook_url``, ``step_webhook_url``,
    ``crew_webhook_url``, ``human_input_webhook_url``, ``human_input_webhook_conn_id``),
    ``on_human_input``, ``deferrable``, ``poll_interval``, ``max_poll_interval``, ``timeout``,
    ``openlineage_include_values``, ``stop_crew``.

    :param inputs: The crew's inputs, a mapping of input name to value. It may be an XComArg or
        come from ``.expand()``.
    :param meta: Free-form metadata the service passes to the crew and echoes in every webhook.
    :param validate_inputs: Read ``GET /inputs`` first and fail, before starting anything, naming
        missing and unknown keys.
    :param wait_for_completion: Wait for the execution to finish (or pause, see ``on_human_input``).
        ``False`` returns right after the kickoff; wait with ``CrewStatusSensor`` instead.

    :xcom return_value:
    :xcom kickoff_id: The kickoff id, pushed right after the kickoff, before any waiting.
    :xcom kicked_off_at: ``{"kickoff_id", "epoch_seconds"}``: when the execution started. A sensor
        or review task downstream counts its 404 grace period from then.
    :xcom webhooks: ``{"kickoff_id", "task_webhook_url", "step_webhook_url", "crew_webhook_url"}``:
        the webhook URLs this kickoff gave (no authentication settings), for ``CrewResumeOperator``
        to send again at resume.
    :xcom result:
    :xcom human_input:
    :xcom usage:
    :xcom status:
    :xcom execution_url:
    :xcom crew_events: With the connection's ``event_stream``: what the crew's events said, kept by the
        api-server as they come (``{"kickoff_id", "received", "ended", "error", "task", "agent",
        "usage", "model_calls", "tool_calls", ...}``; docs/webhook-wake.md, "The event stream").
    """

    subscribes_to_events = True  # its POST carries the event stream's subscription
    template_fields: Sequence[str] = (
        "inputs",
        "meta",
        "task_webhook_url",
        "step_webhook_url",
        "crew_webhook_url",
        "human_input_webhook_url",
        *BUDGET_TEMPLATE_FIELDS,
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"inputs": "json", "meta": "json"}
    ui_color = "#e9d8fd"
    operator_extra_links = (CrewExecutionLink(),)

    def __init__(
        self,
        *,
        inputs: Mapping[str, Any] | Any,
        crew_conn_id: str = CrewHook.default_conn_name,
        meta: Mapping[str, Any] | None = None,
        task_webhook_url: str | None = None,
        step_webhook_url: str | None = None,
        crew_webhook_url: str | None = None,
        human_input_webhook_url: str | None = None,
        human_input_webhook_conn_id: str | None = None,
        validate_inputs: bool = True,
        wait_for_completion: bool = True,
        on_human_input: str = OnHumanInput.RETURN.value,
        deferrable: bool = default_deferrable(),
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        openlineage_include_values: bool = False,
        stop_crew: bool | None = None,
        max_tokens: int | str | None = None,
        max_cost: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stop_crew = checked_stop_crew(stop_crew)
        self._set_budget(max_tokens, max_cost)
        self.inputs = inputs
        self.crew_conn_id = crew_conn_id
        self.meta = meta
        self.task_webhook_url = task_webhook_url
        self.step_webhook_url = step_webhook_url
        self.crew_webhook_url = crew_webhook_url
        self.human_input_webhook_url = human_input_webhook_url
        self.human_input_webhook_conn_id = human_input_webhook_conn_id
        self.validate_inputs = validate_inputs
        self.wait_for_completion = wait_for_completion
        self.on_human_input = OnHumanInput.parse(on_human_input)
        self.deferrable = deferrable
        self.openlineage_include_values = openlineage_include_values
        self._set_wait_timing(
            poll_interval=poll_interval, max_poll_interval=max_poll_interval, timeout=timeout
        )
        self._validate_inputs_shape()
        self._validate_webhooks()

    # -- validation at DAG parse (and again at task start, for templated values) ------------------

    def _validate_inputs_shape(self) -> None:
        if is_template_or_xcom(self.inputs) or isinstance(self.inputs, Mapping):
            return
        raise CrewConfigurationError(
            f"inputs must be a mapping of input name to value, e.g. {{'topic': 'AI'}}; got "
            f"{type(self.inputs).__name__}."
        )

    def _validate_webhooks(self) -> None:
        for parameter in (*WEBHOOK_PARAMETERS, "human_input_webhook_url"):
            check_webhook_parameter(getattr(self, parameter), parameter)
        check_pause_webhook(self.human_input_webhook_url, self.human_input_webhook_conn_id)

    def _validate_rendered(self, hook: CrewHook) -> None:
        """At task start, once templates and XComArgs are rendered: the parse-time checks again, and
        those that need the connection. What fails here fails before anything is paid."""
        self._validate_inputs_shape()
        self._validate_webhooks()
        if not isinstance(self.inputs, Mapping):
            raise CrewConfigurationError(
                f"inputs rendered to {type(self.inputs).__name__}; it must be a mapping."
            )
        refuse_own_crew_webhook(self, hook.config)
        if self.wait_for_completion:
            self._task_budget(hook.config)

    def _check_inputs_against_crew(self, hook: CrewHook, inputs: Mapping[str, Any]) -> None:
        from airflow_provider_crew.models import inputs_mismatch

        expected = hook.get_inputs()
        mismatch = inputs_mismatch(expected, inputs)
        if mismatch:
            raise CrewConfigurationError(
                f"inputs do not match what the crew expects ({mismatch}). The crew declares {expected}. "
                "Nothing was started. Fix `inputs`, or set validate_inputs=False."
            )

    # -- execution ----------------------------------------------------------------------------------

    def execute(self, context: Context) -> str:
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        self._validate_rendered(hook)
        ti = context["ti"]
        record = kickoff_record(context, self)
        # On Airflow 3.3+ a retry reattaches to the execution an earlier try of this run started.
        started = execution_to_reattach(record, hook, meta=self.meta)
        if started is None:
            if self.validate_inputs:
                self._check_inputs_against_crew(hook, self.inputs)
            # The pause webhook: the connection's, or this run's address on Airflow's api-server when the
            # connection is the webhook receiver (its pauses then wake the waits).
            conn_id, url = self.human_input_webhook_conn_id, self.human_input_webhook_url
            run = (ti.dag_id, ti.run_id) if conn_id == DEFAULT_RECEIVER_CONN_ID else None
            pause_webhook = human_input_webhook(url, conn_id, run=run) if conn_id else None
            wake = self._webhook_wake(context, hook)
            started = start_execution(
                record,
                lambda: hook.kickoff(
                    self.inputs,
                    meta=self.meta,
                    task_webhook_url=self.task_webhook_url or None,
                    step_webhook_url=self.step_webhook_url or None,
                    crew_webhook_url=wake.crew_webhook_url
                    if wake is not None
                    else (self.crew_webhook_url or None),
                    human_input_webhook=pause_webhook,
                    event_stream=wake.event_stream if wake is not None else None,
                ),
                claim={"try_number": try_number(context)},
            )
            self.log.info("Started crew execution %s", started["kickoff_id"])
            metrics.count("crew.execution.started", **record.task)
        # The id and the time come from the execution's record alike after a reattach and a kickoff.
        kickoff_id, kicked_off_at = started["kickoff_id"], epoch_seconds(started)
        if kicked_off_at is not None:
            # For waits downstream (kickoff_id=kickoff.output), again after a retry reattached (a new try
            # starts with no XCom): their 404 grace counts from the kickoff.
            ti.xcom_push(key=XCOM_KICKED_OFF_AT, value=kicked_off_at_record(kickoff_id, kicked_off_at))
        # Kept (without credentials) so CrewResumeOperator can re-supply them: the service forgets
        # webhook addresses at resume (docs/contract.md).
        webhooks = {name: getattr(self, name) or None for name in WEBHOOK_PARAMETERS}
        ti.xcom_push(key=XCOM_WEBHOOKS, value={"kickoff_id": kickoff_id, **webhooks})
        ti.xcom_push(key=XCOM_KICKOFF_ID, value=kickoff_id)
        self._follow_execution(context, hook, kickoff_id)  # the execution link and lineage
        if not self.wait_for_completion:
            name_execution_in_asset_events(context, self, kickoff_id, None)
            return kickoff_id
        result = self._wait(
            context,
            kickoff_id,
            wait_for=self.on_human_input.wait_for,
            timeout=self.timeout,
            kicked_off_at=kicked_off_at,
            hook=hook,
        )
        execution_ended(record, result.outcome)
        return self._finish_wait(context, kickoff_id, result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> str:
        """Resume after the trigger fired: validate its event and finish as the blocking path does."""
        kickoff_id, result = self._result_from_event(context, event)
        execution_ended(kickoff_record(context, self), result.outcome)
        return self._finish_wait(context, kickoff_id, result)

    def _after_stop(self, context: Context, kickoff_id: str, stopped: dict[str, str]) -> None:
        """A stopped execution is nobody's to reattach to: a retry, or the next run, starts anew. One
        the service did not say it stopped (no /stop, no answer) may run on: a retry reattaches to it."""
        from airflow_provider_crew.models import StopOutcome

        super()._after_stop(context, kickoff_id, stopped)
        if stopped.get("answer") != StopOutcome.STOPPED.value:
            return
        try:
            forget_execution(kickoff_record(context, self))
        except Exception as error:  # a retry then finds it REVOKED, and starts anew all the same
            self.log.warning("Could not drop the record of crew execution %s: %s", kickoff_id, error)


__all__ = ["CrewKickoffOperator"]
