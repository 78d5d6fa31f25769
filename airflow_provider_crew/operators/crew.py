"""Operators that start crew executions and send human feedback to paused ones."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_crew._compat import (
    BaseHook,
    BaseOperator,
    default_deferrable,
    task_state_store,
)
from airflow_provider_crew.exceptions import (
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewExecutionFailedError,
    CrewKickoffNotRecordedError,
    CrewNotFoundError,
)
from airflow_provider_crew.hooks.crew import CrewHook, extra_as_dict
from airflow_provider_crew.links.crew import CrewExecutionLink
from airflow_provider_crew.models import CrewState, HumanInputWebhook, check_webhook_url
from airflow_provider_crew.openlineage import CrewOpenLineageMixin
from airflow_provider_crew.operators.base import (
    XCOM_KICKED_OFF_AT,
    XCOM_KICKOFF_ID,
    XCOM_RESUME,
    XCOM_WEBHOOKS,
    CrewWaitMixin,
    checked_kickoff_id,
    kicked_off_at_record,
    upstream_task_id,
)
from airflow_provider_crew.waiting import (
    DEFAULT_MAX_POLL_INTERVAL,
    DEFAULT_POLL_INTERVAL,
    Outcome,
    WaitFor,
    WaitResult,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

DEFAULT_TIMEOUT = timedelta(hours=24)
ON_HUMAN_INPUT_CHOICES = ("return", "fail", "wait")
WEBHOOK_PARAMETERS = ("task_webhook_url", "step_webhook_url", "crew_webhook_url")


def _is_template_or_xcom(value: Any) -> bool:
    """Values that only get their final form at task start; they are validated then."""
    from airflow.sdk import XComArg

    return isinstance(value, XComArg) or (isinstance(value, str) and "{{" in value)


def check_webhook_parameter(value: Any, parameter: str) -> None:
    if value is None or value == "" or _is_template_or_xcom(value):
        return
    try:
        check_webhook_url(value, parameter)
    except ValueError as error:
        raise CrewConfigurationError(str(error)) from None


def _plain_extra(connection: Any, conn_id: str) -> dict[str, Any]:
    """The connection's extra as a dict, read without ``extra_dejson``.

    ``extra_dejson`` hands every value to Airflow's secret masker, which logs "Skipping masking for a
    secret as it's too short (<5 chars)" for any short value, secret or not (``"30"``, ``"true"``).
    The only extra read here, ``strategy``, is no secret, and Airflow already masked the extra as a
    whole when it fetched the connection.
    """
    return extra_as_dict(
        connection.extra,
        invalid=f"human_input_webhook_conn_id={conn_id!r}: the connection's extra is not a JSON object; "
        'use e.g. {"strategy": "bearer"} or leave it empty.',
    )


def _human_input_webhook(url: str | None, conn_id: str) -> HumanInputWebhook:
    """Build ``humanInputWebhook`` from an Airflow connection, so no credential sits in DAG code.

    Password alone: bearer token. Login and password: basic. ``{"strategy": ...}`` in the
    connection's extra overrides the guess. Without ``url``, the connection's host is the URL.
    """
    connection = BaseHook.get_connection(conn_id)
    url = url or connection.host
    if not url:
        raise CrewConfigurationError(
            f"No human-input webhook URL: give human_input_webhook_url, or put the URL in the host of "
            f"connection {conn_id!r}."
        )
    login, password = connection.login or None, connection.password or None
    strategy = _plain_extra(connection, conn_id).get("strategy") or ("basic" if login else "bearer")
    if not password:
        raise CrewConfigurationError(
            f"human_input_webhook_conn_id={conn_id!r}: the connection has no password. Put the bearer token "
            "the service must send in its password field (or a login and password for basic auth)."
        )
    if strategy == "bearer":
        authentication: dict[str, Any] = {"strategy": "bearer", "token": password}
    elif strategy == "basic":
        if not login:
            raise CrewConfigurationError(
                f"human_input_webhook_conn_id={conn_id!r}: strategy 'basic' needs the connection's login."
            )
        authentication = {"strategy": "basic", "username": login, "password": password}
    else:
        raise CrewConfigurationError(
            f"human_input_webhook_conn_id={conn_id!r}: extra 'strategy' is {strategy!r}; "
            "use 'bearer' or 'basic'."
        )
    try:
        return HumanInputWebhook.model_validate({"url": url, "authentication": authentication})
    except ValueError:
        # The model's message could echo the credential; name the fields instead.
        raise CrewConfigurationError(
            f"human_input_webhook_url={url!r} with connection {conn_id!r} is not a valid human-input "
            "webhook: the URL must be http(s) and the connection must hold a token or a login and password."
        ) from None


class CrewKickoffOperator(CrewOpenLineageMixin, CrewWaitMixin, BaseOperator):
    """
    Start an execution of a deployed crew (``POST /kickoff``) and, by default, wait for it.

    Before starting, the operator checks ``inputs`` against ``GET /inputs`` and names missing or
    unknown keys. The kickoff id is the task's return value, so ``kickoff_id=kickoff.output`` works
    in the sensor and the other operators. It is pushed before any waiting.

    The service calls the three notification webhooks with a JSON ``POST`` and, by the contract,
    without credentials. The human-input webhook gets a credential, which comes from an Airflow
    connection so that none sits in DAG code.

    :param inputs: The crew's inputs, a mapping of input name to value. It may be an XComArg or
        come from ``.expand()``.
    :param crew_conn_id: The ``crew`` connection: base URL and bearer token.
    :param meta: Free-form metadata the service passes to the crew and echoes in every webhook.
    :param task_webhook_url: URL the service calls after each crew task (http or https).
    :param step_webhook_url: URL the service calls after each agent step.
    :param crew_webhook_url: URL the service calls when the execution completes.
    :param human_input_webhook_url: URL where the service announces a pause for human input.
        Without it, the connection's host is the URL. Crew tasks that ask for human input pause only
        when the kickoff gives a human-input webhook; otherwise they run through.
    :param human_input_webhook_conn_id: Connection holding the credential the service must send to
        the human-input webhook: password alone = bearer token; login and password = basic auth;
        extra ``{"strategy": "bearer"}`` or ``"basic"`` overrides that guess. Any connection type
        works (``generic`` is built into Airflow); only host, login, password and extra are read.
    :param validate_inputs: Read ``GET /inputs`` first and fail, before starting anything, naming
        missing and unknown keys.
    :param wait_for_completion: Wait for the execution to finish or pause (see ``on_human_input``).
        ``False`` returns right after the kickoff; wait with ``CrewStatusSensor`` instead.
    :param on_human_input: What a wait does when the execution pauses for human input:
        ``"return"`` finishes the task successfully and pushes the paused task to XCom
        ``human_input`` for a review downstream; ``"fail"`` fails the task; ``"wait"`` keeps
        waiting for someone to resume it outside this DAG run.
    :param deferrable: Wait in the triggerer instead of holding a worker slot. The default is
        Airflow's ``[operators] default_deferrable``.
    :param poll_interval: Seconds before the first status poll; later intervals grow with jitter
        up to ``max_poll_interval``.
    :param max_poll_interval: Longest interval between status polls, in seconds.
    :param timeout: How long to wait, in seconds or as a timedelta. Passing it fails the task; the
        execution itself is not stopped.
    :param openlineage_include_values: With the OpenLineage provider installed, also send the
        input values and the output to lineage backends. Off by default, since they may be
        private; the input names, the state, the progress and the token usage are always sent
        (docs/lineage.md).

    :xcom return_value: The kickoff id.
    :xcom kickoff_id: The kickoff id, pushed before any waiting.
    :xcom kicked_off_at: ``{"kickoff_id", "epoch_seconds"}``: when the execution started. A sensor
        or review task downstream counts its 404 grace period from then.
    :xcom webhooks: The task, step and crew webhook URLs this kickoff gave (no credentials), for
        ``CrewResumeOperator`` to send again at resume.
    :xcom output: When the wait ends with the execution finished: its final output, a ``dict``
        when the crew returns structured output (``result_json``), else a string. Not pushed when
        the kickoff returns at a pause, so pulling it then gives ``None``.
    :xcom human_input: When the wait ends at a pause (``on_human_input="return"``):
        ``{"execution_id", "task_id", "task_output"}`` of the paused crew task.
    :xcom status: When waiting: the last status record, as the service sent it.
    :xcom execution_url: The execution's page, when the connection has an execution page URL
        template; pushed right after the kickoff. The task's "Crew execution" link opens it.
    """

    template_fields: Sequence[str] = (
        "inputs",
        "meta",
        "task_webhook_url",
        "step_webhook_url",
        "crew_webhook_url",
        "human_input_webhook_url",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"inputs": "json", "meta": "json"}
    ui_color = "#e9d8fd"
    operator_extra_links = (CrewExecutionLink(),)

    # Where a retry finds the execution an earlier try started (task state store, Airflow 3.3+).
    STATE_KEY = "crew_kickoff_id"
    # How long to keep trying to write it while Airflow's API server is overloaded.
    STATE_STORE_PATIENCE = 120.0

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
        on_human_input: str = "return",
        deferrable: bool = default_deferrable(),
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        openlineage_include_values: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
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
        self.on_human_input = on_human_input
        self.deferrable = deferrable
        self.openlineage_include_values = openlineage_include_values
        self._set_wait_timing(
            poll_interval=poll_interval, max_poll_interval=max_poll_interval, timeout=timeout
        )
        self._validate_inputs_shape()
        self._validate_webhooks()
        self._validate_on_human_input()

    # -- validation at DAG parse (and again at task start, for templated values) ------------------

    def _validate_inputs_shape(self) -> None:
        if _is_template_or_xcom(self.inputs) or isinstance(self.inputs, Mapping):
            return
        raise CrewConfigurationError(
            f"inputs must be a mapping of input name to value, e.g. {{'topic': 'AI'}}; got "
            f"{type(self.inputs).__name__}."
        )

    def _validate_webhooks(self) -> None:
        for parameter in (*WEBHOOK_PARAMETERS, "human_input_webhook_url"):
            check_webhook_parameter(getattr(self, parameter), parameter)
        if self.human_input_webhook_url and not self.human_input_webhook_conn_id:
            raise CrewConfigurationError(
                "human_input_webhook_url needs human_input_webhook_conn_id: a connection holding the bearer "
                "token (password) or login and password the service must send to it."
            )

    def _validate_on_human_input(self) -> None:
        if self.on_human_input not in ON_HUMAN_INPUT_CHOICES:
            raise CrewConfigurationError(
                f"on_human_input={self.on_human_input!r} is not known; use one of "
                f"{', '.join(ON_HUMAN_INPUT_CHOICES)}."
            )

    def _check_inputs_against_crew(self, hook: CrewHook, inputs: Mapping[str, Any]) -> None:
        expected = hook.get_inputs()
        missing = [name for name in expected if name not in inputs]
        unknown = [name for name in inputs if name not in expected]
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {missing}")
            if unknown:
                problems.append(f"unknown {unknown}")
            raise CrewConfigurationError(
                f"inputs do not match what the crew expects ({'; '.join(problems)}). The crew declares "
                f"{expected}. Nothing was started. Fix `inputs`, or set validate_inputs=False."
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
        self._kicked_off_at: float | None = None  # set by _kickoff; a reattached execution has none
        kickoff_id = self._reattach_or_kickoff(context, hook)
        ti = context["ti"]
        ti.xcom_push(key=XCOM_KICKOFF_ID, value=kickoff_id)
        self._record_execution(context, hook, kickoff_id)  # the execution link and lineage
        if not self.wait_for_completion:
            self._forget_execution(context)
            return kickoff_id
        result = self._wait(
            context,
            kickoff_id,
            wait_for=WaitFor.COMPLETION if self.on_human_input == "wait" else WaitFor.HUMAN_INPUT,
            timeout=self.timeout,
            kicked_off_at=self._kicked_off_at,
            hook=hook,
        )
        return self._finish(context, kickoff_id, result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> str:
        """Resume after the trigger fired: validate its event and finish as the blocking path does."""
        kickoff_id, result = self._result_from_event(event)
        return self._finish(context, kickoff_id, result)

    def _finish(self, context: Context, kickoff_id: str, result: WaitResult) -> str:
        if result.outcome in (Outcome.SUCCEEDED, Outcome.PAUSED, Outcome.FAILED):
            # Done with this execution either way: a retry or a cleared task starts a new one.
            self._forget_execution(context)
        self._raise_for_outcome(kickoff_id, result)
        self._push_result(context, kickoff_id, result)
        if result.outcome is Outcome.PAUSED and self.on_human_input == "fail":
            paused = result.last_status.paused_task_id if result.last_status else "?"
            raise CrewExecutionFailedError(
                f"Crew execution {kickoff_id} paused for human input on task "
                f"{paused!r} and on_human_input='fail'. "
                "Resume it with CrewResumeOperator, or set on_human_input='return' or 'wait'."
            )
        return kickoff_id

    def _kickoff(self, context: Context, hook: CrewHook) -> str:
        assert isinstance(self.inputs, Mapping)
        if self.validate_inputs:
            self._check_inputs_against_crew(hook, self.inputs)
        human_input_webhook = (
            _human_input_webhook(self.human_input_webhook_url, self.human_input_webhook_conn_id)
            if self.human_input_webhook_conn_id
            else None
        )
        # An unknown outcome raises CrewOutcomeUnknownError, an AirflowFailException: no retry can
        # start a second, paid execution.
        kickoff_id = hook.kickoff(
            self.inputs,
            meta=self.meta,
            task_webhook_url=self.task_webhook_url or None,
            step_webhook_url=self.step_webhook_url or None,
            crew_webhook_url=self.crew_webhook_url or None,
            human_input_webhook=human_input_webhook,
        )
        self._kicked_off_at = time.time()
        self.log.info("Started crew execution %s", kickoff_id)
        return kickoff_id

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
        """On Airflow 3.3+, a retry reattaches to the execution an earlier try started."""
        store = self._state_store(context)
        kickoff_id = self._previous_execution(store, hook) if store is not None else None
        if kickoff_id is None:
            kickoff_id = self._kickoff(context, hook)
            if store is not None:
                # Before anything else can fail: a retry must find this execution, not start another.
                self._remember_execution(store, kickoff_id)
        self._publish_kickoff(context, kickoff_id)
        return kickoff_id

    def _previous_execution(self, store: Any, hook: CrewHook) -> str | None:
        """The execution an earlier try started and a retry should reattach to, if any."""
        previous = store.get(self.STATE_KEY)
        if previous:
            try:
                state: CrewState | None = hook.get_status(previous).state
            except CrewNotFoundError:
                state = None  # possibly still queued; the wait tolerates a short run of 404s
            if state is not CrewState.FAILED:
                self.log.info(
                    "Reattaching to crew execution %s started by an earlier try (state: %s) instead of "
                    "starting a second one.",
                    previous,
                    state.value if state else "not visible yet",
                )
                return str(previous)
            self.log.info("Crew execution %s of an earlier try FAILED; starting a new one.", previous)
        return None

    def _remember_execution(self, store: Any, kickoff_id: str) -> None:
        """Record the execution for a retry, repeating the write while Airflow's API is overloaded.

        Without the record a retry would start a second execution, so when it cannot be written
        within ``STATE_STORE_PATIENCE`` seconds the task fails without retry, naming the execution.
        """
        deadline = time.monotonic() + self.STATE_STORE_PATIENCE
        pause = 1.0
        while True:
            try:
                store.set(self.STATE_KEY, kickoff_id)
                return
            except Exception as error:  # the SDK raises AirflowRuntimeError; any failure is the same here
                if time.monotonic() + pause > deadline:
                    raise CrewKickoffNotRecordedError(
                        f"Crew execution {kickoff_id} started, but Airflow could not record its id for "
                        f"a retry to reattach to ({type(error).__name__}: {error}). The task fails "
                        "without retry so that no second execution starts; the execution keeps running: "
                        f"follow it with CrewStatusSensor(kickoff_id={kickoff_id!r}) or cancel it at "
                        "the service."
                    ) from error
                self.log.warning(
                    "Could not record crew execution %s for retries (%s); trying again in %.0f s.",
                    kickoff_id,
                    error,
                    pause,
                )
                time.sleep(pause)
                pause = min(pause * 2, 15.0)

    def _state_store(self, context: Context) -> Any:
        return task_state_store(context)

    def _forget_execution(self, context: Context) -> None:
        store = self._state_store(context)
        if store is not None:
            store.delete(self.STATE_KEY)


class CrewResumeOperator(CrewOpenLineageMixin, CrewWaitMixin, BaseOperator):
    """
    Send human feedback to an execution paused in Pending Human Input (``POST /resume``).

    ``is_approve=True`` lets the crew continue; ``False`` has it redo the paused task with
    ``human_feedback`` as context, after which it pauses again. ``human_feedback`` is sent as
    given, also when approving (the contract makes it context for later tasks).

    The service forgets webhook addresses at resume (docs/contract.md). By default this operator
    sends again the ones the kickoff of the same execution used. It reads them from the kickoff
    task's XCom ``webhooks``, which holds no credentials, found through ``kickoff_id=kickoff.output``
    or ``kickoff_task_id``. Addresses given here take precedence.

    Resuming an execution that is not paused fails with an error that gives its current state.

    :param kickoff_id: Required. The execution to resume: the kickoff id, usually
        ``kickoff.output``. The contract's ``/resume`` calls it ``execution_id``.
    :param crew_task_id: The paused crew task the feedback is about, e.g.
        ``"{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}"``. The service
        also accepts the task's name.
    :param human_feedback: The feedback text. Required, non-blank, when ``is_approve=False``.
    :param is_approve: ``True`` to approve and continue; ``False`` to have the task redone with
        the feedback. May be a template that renders to a bool.
    :param crew_conn_id: The ``crew`` connection.
    :param task_webhook_url: Task-completion webhook to use after the resume.
    :param step_webhook_url: Agent-step webhook to use after the resume.
    :param crew_webhook_url: Crew-completion webhook to use after the resume.
    :param carry_over_webhooks: Send again the kickoff's webhook URLs that are not given here.
    :param kickoff_task_id: The kickoff task whose webhook URLs to carry over; found from
        ``kickoff_id`` when that is the kickoff's XComArg (``kickoff.output``).
    :param wait_for: ``None`` returns right after ``POST /resume``; ``"human_input"`` waits for
        the next pause or the end; ``"completion"`` waits for the end.
    :param deferrable: Wait in the triggerer instead of holding a worker slot. The default is
        Airflow's ``[operators] default_deferrable``.
    :param poll_interval: Seconds before the first status poll; later intervals grow with jitter
        up to ``max_poll_interval``.
    :param max_poll_interval: Longest interval between status polls, in seconds.
    :param timeout: How long to wait, in seconds or as a timedelta.
    :param openlineage_include_values: With the OpenLineage provider installed, also send the output
        to lineage backends. Off by default, since they may be private; the input names, the
        state, the progress and the token usage are always sent (docs/lineage.md).
    :param execution_id: Deprecated: the old name of ``kickoff_id``. It still works and warns with
        ``AirflowProviderDeprecationWarning``.

    :xcom return_value: The ``/resume`` answer, ``{"status": "resumed" | "retrying" | "completed",
        "message": ...}``. With ``wait_for``, it also has ``"outcome"``: ``"succeeded"`` or
        ``"paused"``.
    :xcom output: With ``wait_for``, when the execution finished: its final output.
    :xcom human_input: With ``wait_for="human_input"``, when the execution paused again:
        ``{"execution_id", "task_id", "task_output"}`` of the paused crew task.
    :xcom status: With ``wait_for``: the last status record.
    :xcom resume: With ``wait_for``: the ``/resume`` answer, kept across a deferral.
    :xcom execution_url: The execution's page, when the connection has an execution page URL
        template; pushed before ``POST /resume``. The task's "Crew execution" link opens it.
    """

    template_fields: Sequence[str] = (
        "kickoff_id",
        "crew_task_id",
        "human_feedback",
        "is_approve",
        "task_webhook_url",
        "step_webhook_url",
        "crew_webhook_url",
    )
    ui_color = "#fde8d8"
    operator_extra_links = (CrewExecutionLink(),)

    def __init__(
        self,
        *,
        kickoff_id: str | Any = None,
        crew_task_id: str | Any,
        human_feedback: str | Any = "",
        is_approve: bool | Any,
        crew_conn_id: str = CrewHook.default_conn_name,
        task_webhook_url: str | None = None,
        step_webhook_url: str | None = None,
        crew_webhook_url: str | None = None,
        carry_over_webhooks: bool = True,
        kickoff_task_id: str | None = None,
        wait_for: str | None = None,
        deferrable: bool = default_deferrable(),
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        openlineage_include_values: bool = False,
        execution_id: str | Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kickoff_id = _kickoff_id_or_old_name(kickoff_id, execution_id)
        self.crew_task_id = crew_task_id
        self.human_feedback = human_feedback
        self.is_approve = is_approve
        self.crew_conn_id = crew_conn_id
        self.task_webhook_url = task_webhook_url
        self.step_webhook_url = step_webhook_url
        self.crew_webhook_url = crew_webhook_url
        self.carry_over_webhooks = carry_over_webhooks
        self.kickoff_task_id = kickoff_task_id or upstream_task_id(self.kickoff_id)
        self.wait_for = WaitFor.parse(wait_for) if wait_for is not None else None
        self.deferrable = deferrable
        self.openlineage_include_values = openlineage_include_values
        self._set_wait_timing(
            poll_interval=poll_interval, max_poll_interval=max_poll_interval, timeout=timeout
        )
        for parameter in WEBHOOK_PARAMETERS:
            check_webhook_parameter(getattr(self, parameter), parameter)
        self._validate_feedback()

    def _validate_feedback(self) -> None:
        if _is_template_or_xcom(self.is_approve):
            return
        if not isinstance(self.is_approve, bool):
            raise CrewConfigurationError(
                f"is_approve must be True (approve) or False (request changes), got {self.is_approve!r}."
            )
        feedback = self.human_feedback
        if not self.is_approve and not _is_template_or_xcom(feedback) and not str(feedback or "").strip():
            raise CrewConfigurationError(
                "human_feedback is empty but is_approve=False: say what the crew should change."
            )

    def execute(self, context: Context) -> dict[str, Any]:
        self._validate_feedback()
        if not isinstance(self.is_approve, bool):
            raise CrewConfigurationError(f"is_approve rendered to {self.is_approve!r}; it must be a bool.")
        for parameter in WEBHOOK_PARAMETERS:
            check_webhook_parameter(getattr(self, parameter), parameter)
        execution_id = checked_kickoff_id(self.kickoff_id)
        webhooks = self._webhook_addresses(context, execution_id)
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        self._record_execution(context, hook, execution_id)  # the execution link and lineage
        try:
            result = hook.resume(
                execution_id,
                str(self.crew_task_id),
                str(self.human_feedback or ""),
                self.is_approve,
                **webhooks,
            )
        except CrewBadRequestError as error:
            raise self._not_paused_error(hook, execution_id, error) from None
        self.log.info("Resumed crew execution %s: %s (%s)", execution_id, result.status.value, result.message)
        summary = {"status": result.status.value, "message": result.message}
        if self.wait_for is None:
            return summary
        # Kept for execute_complete: XCom survives a deferral, instance attributes do not.
        context["ti"].xcom_push(key=XCOM_RESUME, value=summary)
        wait_result = self._wait(
            context, execution_id, wait_for=self.wait_for, timeout=self.timeout, hook=hook
        )
        return self._finish(context, execution_id, wait_result, summary)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        execution_id, result = self._result_from_event(event)
        summary = context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_RESUME) or {}
        return self._finish(context, execution_id, result, summary)

    def _finish(
        self, context: Context, execution_id: str, result: WaitResult, summary: dict[str, Any]
    ) -> dict[str, Any]:
        self._raise_for_outcome(execution_id, result)
        self._push_result(context, execution_id, result)
        return summary | {"outcome": result.outcome.value}

    def _webhook_addresses(self, context: Context, execution_id: str) -> dict[str, str | None]:
        return resume_webhook_addresses(
            context,
            execution_id,
            given={name: getattr(self, name) or None for name in WEBHOOK_PARAMETERS},
            kickoff_task_id=self.kickoff_task_id,
            carry_over=self.carry_over_webhooks,
            log=self.log,
        )

    def _not_paused_error(self, hook: CrewHook, execution_id: str, error: CrewBadRequestError) -> CrewError:
        try:
            current = hook.get_status(execution_id).describe()
        except CrewError as status_error:
            current = f"unknown ({status_error})"
        return CrewBadRequestError(
            f"Crew execution {execution_id} could not be resumed: it is not waiting for human input "
            f"(current state: {current}). The service said: {error.service_message or error}",
            endpoint=error.endpoint,
            status_code=error.http_status,
            service_message=error.service_message,
        )


def _kickoff_id_or_old_name(kickoff_id: Any, execution_id: Any) -> Any:
    """``kickoff_id``, or the value given under its old name ``execution_id`` (with a warning)."""
    if execution_id is None:
        if kickoff_id is None or (isinstance(kickoff_id, str) and not kickoff_id.strip()):
            raise CrewConfigurationError(
                "kickoff_id is required: the execution to resume, usually kickoff_id=kickoff.output."
            )
        return kickoff_id
    if kickoff_id is not None:
        raise CrewConfigurationError(
            "Both kickoff_id and execution_id are given; execution_id is the old name of kickoff_id. "
            "Pass kickoff_id only."
        )
    warnings.warn(
        "CrewResumeOperator(execution_id=...) is deprecated; pass kickoff_id=... instead (same value, "
        "the name the sensor and the other operators use).",
        AirflowProviderDeprecationWarning,
        stacklevel=3,
    )
    return execution_id


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
