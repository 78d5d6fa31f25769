"""The operator that starts a crew execution and, by default, waits for it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import BaseOperator
from airflow_provider_crew.connection_form import DEFAULT_RECEIVER_CONN_ID
from airflow_provider_crew.exceptions import (
    CrewConfigurationError,
    CrewError,
    CrewKickoffNotRecordedError,
    CrewNotFoundError,
)
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
from airflow_provider_crew.operators.paid_post import PaidPost, stopped_while_sending
from airflow_provider_crew.operators.wait import (
    DEFAULT_TIMEOUT,
    CrewWaitMixin,
)
from airflow_provider_crew.operators.wait_stop import BUDGET_TEMPLATE_FIELDS, checked_stop_crew
from airflow_provider_crew.status import CrewState
from airflow_provider_crew.waiting.rules import (
    DEFAULT_MAX_POLL_INTERVAL,
    DEFAULT_POLL_INTERVAL,
    OnHumanInput,
    Outcome,
    WaitResult,
)
from airflow_provider_crew.waiting.xcom import (
    XCOM_KICKED_OFF_AT,
    XCOM_KICKOFF_ID,
    XCOM_WEBHOOKS,
    epoch_seconds,
    kicked_off_at_record,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_crew.models import HumanInputWebhook


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

    # The record of this run's POST /kickoff (operators.paid_post): claimed, then the execution's id, so
    # that a retry reattaches to it. It outlives the try that wrote it, so that a retry finds it even when
    # Airflow failed a try that had finished; after a clear it reads as absent.
    RECORD_KEY = "crew_kickoff_id"
    # Where 1.0 kept its claim, beside the execution's id.
    LEGACY_CLAIM_KEY = "crew_kickoff_claim"

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
        self._validate_inputs_shape()
        self._validate_webhooks()  # templated URLs are rendered now
        if not isinstance(self.inputs, Mapping):
            raise CrewConfigurationError(
                f"inputs rendered to {type(self.inputs).__name__}; it must be a mapping."
            )
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        refuse_own_crew_webhook(self, hook.config)
        if self.wait_for_completion:
            self._task_budget(hook.config)  # a bad cap fails here, before anything is paid
        self._kicked_off_at: float | None = None  # set by _kickoff, or from the record on a reattach
        kickoff_id = self._reattach_or_kickoff(context, hook)
        ti = context["ti"]
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
            kicked_off_at=self._kicked_off_at,
            hook=hook,
        )
        return self._finish(context, kickoff_id, result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> str:
        """Resume after the trigger fired: validate its event and finish as the blocking path does."""
        kickoff_id, result = self._result_from_event(context, event)
        return self._finish(context, kickoff_id, result)

    def _finish(self, context: Context, kickoff_id: str, result: WaitResult) -> str:
        # The record stays after any other end: a try Airflow failed after it had finished (its
        # heartbeat was late, on an overloaded Airflow) leaves its retry the execution to reattach to,
        # not a second one to start; after a clear it reads as absent (operators.paid_post).
        if result.outcome is Outcome.FAILED:
            self._forget_execution(context)  # a retry starts anew after a FAILED execution (documented)
        self._finish_wait(context, kickoff_id, result)
        return kickoff_id

    def _after_stop(self, context: Context, kickoff_id: str, stopped: dict[str, str]) -> None:
        """A stopped execution is nobody's to reattach to: a retry, or the next run, starts anew. One
        the service did not say it stopped (no /stop, no answer) may run on: a retry reattaches to it."""
        from airflow_provider_crew.models import StopOutcome

        super()._after_stop(context, kickoff_id, stopped)
        if stopped.get("answer") != StopOutcome.STOPPED.value:
            return
        try:
            self._forget_execution(context)
        except Exception as error:  # a retry then finds it REVOKED, and starts anew all the same
            self.log.warning("Could not drop the record of crew execution %s: %s", kickoff_id, error)

    def _forget_execution(self, context: Context) -> None:
        """Drop this run's record of its execution: a retry, or the next run, starts anew."""
        record = self._kickoff_record(context)
        record.drop()
        record.records.delete(self.LEGACY_CLAIM_KEY)

    def _kickoff_record(self, context: Context) -> PaidPost:
        return PaidPost(context, self, key=self.RECORD_KEY, kind="kickoff")

    def _kickoff(self, context: Context, hook: CrewHook, record: PaidPost) -> str:
        assert isinstance(self.inputs, Mapping)
        if self.validate_inputs:
            self._check_inputs_against_crew(hook, self.inputs)
        pause_webhook = self._pause_webhook(context)
        wake = self._webhook_wake(context, hook)
        # An unknown outcome raises CrewOutcomeUnknownError, an AirflowFailException: no retry can
        # start a second, paid execution. The claim stays then, and when the try is stopped mid-request.
        kickoff_id = record.send(
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
            # Kept before anything else can fail: a retry must find this execution, not start another.
            sent=self._started,
            unrecorded=self._not_recorded,
        )
        self.log.info("Started crew execution %s", kickoff_id)
        metrics.count("crew.execution.started", **metrics.task_tags(context["ti"]))
        return kickoff_id

    def _started(self, kickoff_id: str) -> dict[str, Any]:
        """The record a retry reattaches from; its time is the one XCom ``kicked_off_at`` publishes."""
        self._kicked_off_at = time.time()
        return {"kickoff_id": kickoff_id, "epoch_seconds": self._kicked_off_at}

    @staticmethod
    def _not_recorded(kickoff_id: str, error: Exception) -> CrewError:
        """Without its record a retry would start a second execution: fail without retry, naming it."""
        return CrewKickoffNotRecordedError(
            f"Crew execution {kickoff_id} started, but Airflow could not record its id for a retry to "
            f"reattach to ({type(error).__name__}: {error}). The task fails without retry so that no "
            "second execution starts; the execution keeps running: follow it with "
            f"CrewStatusSensor(kickoff_id={kickoff_id!r}) or cancel it at the service."
        )

    def _pause_webhook(self, context: Context) -> HumanInputWebhook | None:
        """The human-input webhook: the connection's, or this run's address on Airflow's api-server
        when the connection is the webhook receiver (its pauses then wake the waits)."""
        conn_id = self.human_input_webhook_conn_id
        if not conn_id:
            return None
        ti = context["ti"]
        run = (ti.dag_id, ti.run_id) if conn_id == DEFAULT_RECEIVER_CONN_ID else None
        return human_input_webhook(self.human_input_webhook_url, conn_id, run=run)

    def _publish_kickoff(self, context: Context, kickoff_id: str) -> None:
        """Tell downstream tasks about the execution (again, after a retry reattached to it)."""
        if self._kicked_off_at is not None:
            # For waits downstream (kickoff_id=kickoff.output): their 404 grace counts from the kickoff.
            context["ti"].xcom_push(
                key=XCOM_KICKED_OFF_AT, value=kicked_off_at_record(kickoff_id, self._kicked_off_at)
            )
        # Kept (without credentials) so CrewResumeOperator can re-supply them: the service forgets
        # webhook addresses at resume (docs/contract.md).
        context["ti"].xcom_push(
            key=XCOM_WEBHOOKS,
            value={
                "kickoff_id": kickoff_id,
                **{name: getattr(self, name) or None for name in WEBHOOK_PARAMETERS},
            },
        )

    def _reattach_or_kickoff(self, context: Context, hook: CrewHook) -> str:
        """On Airflow 3.3+, a retry reattaches to the execution an earlier try of this run started."""
        record = self._kickoff_record(context)
        kickoff_id = self._previous_execution(record, hook)
        if kickoff_id is None:
            kickoff_id = self._kickoff(context, hook, record)
        self._publish_kickoff(context, kickoff_id)
        return kickoff_id

    def _previous_execution(self, record: PaidPost, hook: CrewHook) -> str | None:
        """The execution an earlier try of this run started and a retry should reattach to, if any."""
        earlier = record.earlier()
        # 1.0 kept its claim under a key of its own (delete with 1.0's records, a week after 1.1 is out).
        legacy_claim = record.records.get(self.LEGACY_CLAIM_KEY)
        if earlier is None and legacy_claim is not None:
            earlier = {**legacy_claim, "state": "claimed"}
        if earlier is None:
            return None
        if earlier["state"] == "claimed":
            # The earlier try was stopped during POST /kickoff (or its outcome was unknown): an execution
            # may be running. Nothing tells it from a request that never arrived, so none is started.
            raise stopped_while_sending(
                earlier,
                set_out_to="start a crew execution",
                unrecorded="the execution's id",
                unknown="the service may have started one, which then runs unclaimed (look for it at the "
                f"service, meta {self.meta or {}}).",
                fix="Clear the task to start a new execution.",
            )
        kickoff_id = earlier["kickoff_id"]
        # Published again as kicked_off_at (a new try starts with no XCom): waits downstream count their
        # 404 grace from the kickoff. A record of 1.0 has no time; its claim, written just before, has.
        self._kicked_off_at = epoch_seconds(earlier) or epoch_seconds(legacy_claim)
        try:
            state: CrewState | None = hook.get_status(kickoff_id).state
        except CrewNotFoundError:
            state = None  # possibly still queued; the wait tolerates a short run of 404s
        if state is CrewState.FAILED:
            # The new claim replaces this record in one write: a later try that finds the claim knows
            # this try may have started an execution, instead of reading the old FAILED one.
            self.log.info("Crew execution %s of an earlier try FAILED; starting a new one.", kickoff_id)
            return None
        self.log.info(
            "Reattaching to crew execution %s started by an earlier try (state: %s) instead of starting a "
            "second one.",
            kickoff_id,
            state.value if state else "not visible yet",
        )
        return kickoff_id


__all__ = ["CrewKickoffOperator"]
