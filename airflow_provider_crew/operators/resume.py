"""The operator that sends human feedback to a crew execution paused for human input."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import BaseOperator
from airflow_provider_crew.exceptions import (
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewExecutionNotPausedError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.links.crew import CrewExecutionLink
from airflow_provider_crew.openlineage import CrewOpenLineageMixin
from airflow_provider_crew.operators.base import (
    WEBHOOK_PARAMETERS,
    CrewTaskParameters,
    check_webhook_parameter,
    checked_kickoff_id,
    default_deferrable,
    is_template_or_xcom,
    refuse_own_crew_webhook,
    rendered_bool,
    required_kickoff_id,
    resume_webhook_addresses,
    try_number,
    upstream_task_id,
    why_answer_is_outdated,
)
from airflow_provider_crew.operators.paid_post import PaidPost, stopped_while_sending
from airflow_provider_crew.operators.wait import (
    DEFAULT_TIMEOUT,
    CrewWaitMixin,
)
from airflow_provider_crew.operators.wait_stop import BUDGET_TEMPLATE_FIELDS, checked_stop_crew
from airflow_provider_crew.status import CrewState
from airflow_provider_crew.waiting.rules import DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, OnHumanInput
from airflow_provider_crew.waiting.xcom import XCOM_HUMAN_INPUT, XCOM_KICKOFF_ID, XCOM_RESUME

if TYPE_CHECKING:
    from airflow.sdk import Context


class CrewResumeOperator(CrewOpenLineageMixin, CrewWaitMixin, CrewTaskParameters, BaseOperator):
    """
    Send human feedback to an execution paused in Pending Human Input (``POST /resume``).

    ``is_approve=True`` lets the crew continue; ``False`` has it redo the paused task with
    ``human_feedback`` as context, after which it pauses again. ``human_feedback`` is sent as
    given, also when approving (the contract makes it context for later tasks).

    The service forgets webhook addresses at resume (docs/contract.md). By default this operator
    sends again the ones the kickoff of the same execution used. It reads them from the kickoff
    task's XCom ``webhooks``, which holds no credentials, found through ``kickoff_id=kickoff.output``
    or ``kickoff_task_id``. Addresses given here take precedence.

    Resuming an execution that is not paused fails without retry, with an error that gives its
    current state. Like the kickoff, it waits by default (``wait_for_completion``) and ends at the
    next pause (``on_human_input="return"``) or at the end; like every crew task, it returns the
    kickoff id.

    A feedback is sent once: a retry whose earlier try's ``POST /resume`` went through follows the
    execution instead of sending it again (the task state store on Airflow 3.3+; before 3.3 a status
    read: the execution moved on from the pause the feedback is about, found in the upstream task's
    XCom ``human_input``).

    The parameters crew tasks share mean the same on each, as docs/api.md says once ("The same words
    on every task"): ``crew_conn_id``, the webhook addresses (``task_webhook_url``, ``step_webhook_url``,
    ``crew_webhook_url``), ``kickoff_task_id``, ``on_human_input``, ``deferrable``, ``poll_interval``,
    ``max_poll_interval``, ``timeout``, ``openlineage_include_values``, ``stop_crew``.

    :param kickoff_id: Required. The execution to resume: the kickoff id, usually
        ``kickoff.output``. The contract's ``/resume`` calls it ``execution_id``.
    :param crew_task_id: The paused crew task the feedback is about, e.g.
        ``"{{ ti.xcom_pull(task_ids='kickoff', key='human_input')['task_id'] }}"``. The service
        also accepts the task's name.
    :param human_feedback: The feedback text. Required, non-blank, when ``is_approve=False``.
    :param is_approve: ``True`` to approve and continue; ``False`` to have the task redone with
        the feedback. May be a template: it renders as text, and ``True``/``False`` (any case)
        count as booleans; anything else fails at task start, naming the value.
    :param carry_over_webhooks: Send again the kickoff's webhook URLs that are not given here.
    :param wait_for_completion: Wait for the execution to finish (or pause again, see
        ``on_human_input``). ``False`` returns right after ``POST /resume``.

    :xcom return_value:
    :xcom kickoff_id: The kickoff id.
    :xcom resume: The ``/resume`` answer, ``{"status": "resumed" | "retrying" | "completed",
        "message": ...}``.
    :xcom result:
    :xcom human_input:
    :xcom usage:
    :xcom status:
    :xcom execution_url:
    :xcom crew_events: As the kickoff's, for the events after this resume.
    """

    subscribes_to_events = True  # its POST carries the event stream's subscription
    template_fields: Sequence[str] = (
        "kickoff_id",
        "crew_task_id",
        "human_feedback",
        "is_approve",
        "task_webhook_url",
        "step_webhook_url",
        "crew_webhook_url",
        *BUDGET_TEMPLATE_FIELDS,
    )
    ui_color = "#fde8d8"
    operator_extra_links = (CrewExecutionLink(),)

    # Where a retry finds the answer an earlier try of this run sent (task state store, Airflow 3.3+):
    # operators.paid_post.
    ANSWER_KEY = "crew_resume_answer"

    def __init__(
        self,
        *,
        kickoff_id: str | Any,
        crew_task_id: str | Any,
        human_feedback: str | Any = "",
        is_approve: bool | Any,
        crew_conn_id: str = CrewHook.default_conn_name,
        task_webhook_url: str | None = None,
        step_webhook_url: str | None = None,
        crew_webhook_url: str | None = None,
        carry_over_webhooks: bool = True,
        kickoff_task_id: str | None = None,
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
        self.kickoff_id = required_kickoff_id(kickoff_id, "the execution to resume")
        self.crew_task_id = crew_task_id
        self.human_feedback = human_feedback
        self.is_approve = is_approve
        self.crew_conn_id = crew_conn_id
        self.task_webhook_url = task_webhook_url
        self.step_webhook_url = step_webhook_url
        self.crew_webhook_url = crew_webhook_url
        self.carry_over_webhooks = carry_over_webhooks
        self.kickoff_task_id = kickoff_task_id or upstream_task_id(self.kickoff_id)
        self.wait_for_completion = wait_for_completion
        self.on_human_input = OnHumanInput.parse(on_human_input)
        self.deferrable = deferrable
        self.openlineage_include_values = openlineage_include_values
        self._set_wait_timing(
            poll_interval=poll_interval, max_poll_interval=max_poll_interval, timeout=timeout
        )
        for parameter in WEBHOOK_PARAMETERS:
            check_webhook_parameter(getattr(self, parameter), parameter)
        self._validate_feedback()

    def _validate_feedback(self) -> None:
        if is_template_or_xcom(self.is_approve):
            return
        self.is_approve = rendered_bool(self.is_approve, "is_approve")
        feedback = self.human_feedback
        if not self.is_approve and not is_template_or_xcom(feedback) and not str(feedback or "").strip():
            raise CrewConfigurationError(
                "human_feedback is empty but is_approve=False: say what the crew should change."
            )

    def execute(self, context: Context) -> str:
        self.is_approve = rendered_bool(self.is_approve, "is_approve")
        self._validate_feedback()
        for parameter in WEBHOOK_PARAMETERS:
            check_webhook_parameter(getattr(self, parameter), parameter)
        execution_id = checked_kickoff_id(self.kickoff_id)
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        refuse_own_crew_webhook(self, hook.config)
        self._follow_execution(context, hook, execution_id)  # the execution link and lineage
        record = PaidPost(context, self, key=self.ANSWER_KEY, kind="resume", execution_id=execution_id)
        answer = self._sent_before(context, hook, record)
        if answer is None:
            if self.wait_for_completion:  # a task that does not wait has no budget to keep
                self._refuse_over_budget(hook, execution_id)
            answer = self._send(context, hook, record)
        ti = context["ti"]
        ti.xcom_push(key=XCOM_KICKOFF_ID, value=execution_id)
        ti.xcom_push(key=XCOM_RESUME, value=answer)
        if not self.wait_for_completion:
            return execution_id
        wait_result = self._wait(
            context, execution_id, wait_for=self.on_human_input.wait_for, timeout=self.timeout, hook=hook
        )
        return self._finish_wait(context, execution_id, wait_result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> str:
        execution_id, result = self._result_from_event(context, event)
        return self._finish_wait(context, execution_id, result)

    def _send(self, context: Context, hook: CrewHook, record: PaidPost) -> dict[str, Any]:
        """``POST /resume``, recorded for a retry before it is sent and after it was answered."""
        execution_id = str(record.execution_id)
        webhooks = resume_webhook_addresses(context, execution_id, self, self._webhook_wake(context, hook))
        try:
            result = record.send(
                lambda: hook.resume(
                    execution_id,
                    str(self.crew_task_id),
                    str(self.human_feedback or ""),
                    self.is_approve,
                    **webhooks,
                ),
                claim={"try_number": try_number(context)},
                sent=lambda result: {"answer": {"status": result.status.value, "message": result.message}},
            )
        except CrewBadRequestError as error:
            raise self._not_paused_error(hook, execution_id, error) from None
        self.log.info("Resumed crew execution %s: %s (%s)", execution_id, result.status.value, result.message)
        return {"status": result.status.value, "message": result.message}

    def _sent_before(self, context: Context, hook: CrewHook, record: PaidPost) -> dict[str, Any] | None:
        """The ``/resume`` answer when an earlier try of this run already sent the feedback, else None.

        On Airflow 3.3+ the record says: sent (its answer), never sent (None), or stopped while sending.
        Then, and on any retry before 3.3, a status read tells: the execution has moved on from the
        pause the feedback is about (running, ended, or paused on another output), so it was applied.
        """
        execution_id, kept = str(record.execution_id), record.earlier()
        if kept is not None and kept.get("state") == "sent":
            self.log.info(
                "An earlier try of this task sent this feedback to crew execution %s (%s): following the "
                "execution instead of sending it again.",
                execution_id,
                kept["answer"].get("status"),
            )
            return dict(kept["answer"])
        if kept is None and (record.kept or try_number(context) <= 1):
            return None  # no try of this run sent it (3.3+), or the first try (before 3.3)
        status = hook.get_status(execution_id)
        crew_task_id = str(self.crew_task_id)
        paused_here = (
            status.state is CrewState.WAITING_FOR_HUMAN_INPUT and status.paused_task_id == crew_task_id
        )
        answered_output = self._answered_output(context, execution_id, crew_task_id)
        if paused_here and answered_output is None:
            if kept is not None:  # claimed: that try was stopped during its POST /resume
                raise stopped_while_sending(
                    kept,
                    set_out_to=f"send this feedback to crew execution {execution_id}",
                    unrecorded="the answer",
                    unknown=f"the execution waits on task {crew_task_id!r} again, which may be the redo "
                    "after that feedback, and which output the feedback is about is unknown (no XCom "
                    "human_input upstream).",
                    fix="Check the execution, then clear this task to send the feedback.",
                )
            self.log.warning(
                "Crew execution %s waits on task %r, and which output this feedback is about is unknown (no "
                "XCom human_input upstream): an earlier try may have sent it already. Sending it.",
                execution_id,
                crew_task_id,
            )
            return None
        moved_on = why_answer_is_outdated(status, crew_task_id, answered_output)
        if moved_on is None:
            return None  # still paused on the output the feedback is about: not applied
        self.log.warning(
            "Not sending the feedback again: an earlier try of this task sent it, and it was applied. %s "
            "Following the execution.",
            moved_on,
        )
        finished = status.state is CrewState.SUCCEEDED
        return {
            "status": "retrying" if not self.is_approve else "completed" if finished else "resumed",
            "message": f"Sent by an earlier try of this task and applied; not sent again. {moved_on}",
        }

    def _answered_output(self, context: Context, execution_id: str, crew_task_id: str) -> str | None:
        """The paused task's output this feedback is about: the upstream task's XCom ``human_input``."""
        if not self.kickoff_task_id:
            return None
        pulled = context["ti"].xcom_pull(task_ids=self.kickoff_task_id, key=XCOM_HUMAN_INPUT)
        for pause in pulled if isinstance(pulled, list) else [pulled]:
            if (
                isinstance(pause, dict)
                and pause.get("execution_id") == execution_id
                and pause.get("task_id") == crew_task_id
            ):
                output = pause.get("task_output")
                return output if isinstance(output, str) else None
        return None

    def _not_paused_error(self, hook: CrewHook, execution_id: str, error: CrewBadRequestError) -> CrewError:
        try:
            current = hook.get_status(execution_id).describe()
        except CrewError as status_error:
            current = f"unknown ({status_error})"
        return CrewExecutionNotPausedError(
            f"Crew execution {execution_id} could not be resumed: it is not waiting for human input "
            f"(current state: {current}). The service said: {error.service_message or error}. Failing "
            "without retry.",
            endpoint=error.endpoint,
            status_code=error.http_status,
            service_message=error.service_message,
        )


__all__ = ["CrewResumeOperator"]
