"""CrewHumanReviewOperator: review a paused crew execution in Airflow's human-in-the-loop UI.

One task loops over review rounds inside one task try:

1. wait (deferred to :class:`CrewStatusTrigger`) until the execution pauses for human input or ends;
2. on a pause, write a human-in-the-loop request (the Required Actions page / REST API) and wait for
   the answer without a worker slot: the ``awaiting_input`` state on Airflow 3.3+, ``HITLTrigger``
   on 3.1-3.2;
3. send the answer with ``POST /resume`` (webhook addresses carried over) and go back to 1.

Airflow keeps one human-in-the-loop request per task try and does not let a task rewrite its
subject or body (the execution API's upsert only clears the previous answer). So the text in the
Required Actions page is the one written at the first pause of the try; every round's text is in
XCom ``review_request`` and is what notifiers see. See docs/human-review.md.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_crew._compat import (
    AIRFLOW_V_3_1_PLUS,
    AIRFLOW_V_3_3_PLUS,
    AirflowException,
    BaseOperator,
)
from airflow_provider_crew.exceptions import (
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.models import CrewState, CrewStatus
from airflow_provider_crew.operators._wait import (
    XCOM_KICKOFF_ID,
    CrewWaitMixin,
    seconds,
)
from airflow_provider_crew.operators.crew import (
    DEFAULT_TIMEOUT,
    WEBHOOK_PARAMETERS,
    check_webhook_parameter,
    resume_webhook_addresses,
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
    from airflow.sdk.bases.notifier import BaseNotifier

APPROVE = "Approve"
REQUEST_CHANGES = "Request changes"
OPTIONS = [APPROVE, REQUEST_CHANGES]
FEEDBACK_PARAM = "feedback"
APPROVED_WITHOUT_TEXT = "Approved."

XCOM_REVIEW_REQUEST = "review_request"
XCOM_REVIEW_HISTORY = "review_history"

# After POST /resume a service may still report the old pause for a moment; a pause with the same
# task and output within this window is that stale record, not a new round.
STALE_PAUSE_GRACE = 30.0
OUTPUT_BODY_LIMIT = 20_000

NEEDS_3_1 = (
    "CrewHumanReviewOperator needs Airflow 3.1+ (it uses the human-in-the-loop API of "
    "apache-airflow-providers-standard); this is Airflow {version}. On 3.0, use "
    "CrewKickoffOperator(on_human_input='return') and CrewResumeOperator."
)


class CrewReviewTimeoutError(AirflowException):
    """Nobody answered the review request within ``response_timeout``."""


class CrewHumanReviewOperator(CrewWaitMixin, BaseOperator):
    """
    Let a person review a paused crew execution in the Airflow UI, round after round, until approved.

    The task waits (deferred) until the execution pauses for human input, asks in the Required
    Actions page (options ``Approve`` / ``Request changes``, a ``feedback`` text field that is
    required when requesting changes), sends the answer with ``POST /resume`` and waits again. After
    a request for changes the crew redoes the task and pauses again, and this task asks again; once
    the execution finishes it returns the final output (also XCom ``output``). Every round is
    appended to XCom ``review_history``; the current request is in XCom ``review_request``.

    Needs Airflow 3.1+; on 3.0 constructing it (DAG parse) raises.

    :param kickoff_id: The execution to review (templated), usually ``kickoff.output``.
    :param crew_conn_id: The ``crew`` connection the execution was started with.
    :param inputs: The crew's inputs, shown to the reviewer as context (templated; optional).
    :param subject: Headline of the request; ``{task}`` is replaced by the paused crew task.
    :param assigned_users: Who may answer (``{"id": ..., "name": ...}`` or a list), as HITL operators take it.
    :param notifiers: Notifiers called at every round (``task.body`` is the current round's body).
    :param response_timeout: How long each round waits for an answer. Without an answer in time
        the task fails and the execution stays paused, unless ``approve_on_timeout``.
    :param approve_on_timeout: Approve when ``response_timeout`` passes without an answer.
    :param task_webhook_url: Task-completion webhook to send with every resume.
    :param step_webhook_url: Agent-step webhook to send with every resume.
    :param crew_webhook_url: Crew-completion webhook to send with every resume.
    :param carry_over_webhooks: Re-send the kickoff's webhook addresses at resume (the service
        forgets them otherwise, contract rule 4.2).
    :param kickoff_task_id: The kickoff task whose webhook addresses to carry over; found from
        ``kickoff_id=kickoff.output`` when not given.
    :param poll_interval: First seconds between status polls.
    :param max_poll_interval: Longest seconds between status polls.
    :param timeout: Longest wait for the execution to pause again or finish, per wait.
    """

    template_fields: Sequence[str] = (
        "kickoff_id",
        "inputs",
        "task_webhook_url",
        "step_webhook_url",
        "crew_webhook_url",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"inputs": "json"}
    ui_color = "#fde2e4"

    def __init__(
        self,
        *,
        kickoff_id: str | Any,
        crew_conn_id: str = CrewHook.default_conn_name,
        inputs: Mapping[str, Any] | Any | None = None,
        subject: str = "Review crew task {task}",
        assigned_users: Mapping[str, str] | list[Mapping[str, str]] | None = None,
        notifiers: Sequence[BaseNotifier] | BaseNotifier | None = None,
        response_timeout: timedelta | None = None,
        approve_on_timeout: bool = False,
        task_webhook_url: str | None = None,
        step_webhook_url: str | None = None,
        crew_webhook_url: str | None = None,
        carry_over_webhooks: bool = True,
        kickoff_task_id: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        if not AIRFLOW_V_3_1_PLUS:
            from airflow import __version__
            from airflow.providers.common.compat.sdk import AirflowOptionalProviderFeatureException

            raise AirflowOptionalProviderFeatureException(NEEDS_3_1.format(version=__version__))
        super().__init__(**kwargs)
        self.kickoff_id = kickoff_id
        self.crew_conn_id = crew_conn_id
        self.inputs = inputs
        self.subject = subject
        self.assigned_users: list[Mapping[str, str]] | None = (
            [assigned_users] if isinstance(assigned_users, Mapping) else assigned_users
        )
        self.notifiers: list[BaseNotifier] = (
            list(notifiers) if isinstance(notifiers, Sequence) else [notifiers] if notifiers else []
        )
        if response_timeout is not None and not isinstance(response_timeout, timedelta):
            raise CrewConfigurationError(f"response_timeout must be a timedelta, got {response_timeout!r}.")
        if approve_on_timeout and response_timeout is None:
            raise CrewConfigurationError("approve_on_timeout=True needs a response_timeout.")
        self.response_timeout = response_timeout
        self.approve_on_timeout = approve_on_timeout
        self.task_webhook_url = task_webhook_url
        self.step_webhook_url = step_webhook_url
        self.crew_webhook_url = crew_webhook_url
        self.carry_over_webhooks = carry_over_webhooks
        self.kickoff_task_id = kickoff_task_id or upstream_task_id(kickoff_id)
        # Waiting never holds a worker slot: between rounds the trigger waits, during a round the
        # human-in-the-loop machinery does.
        self.deferrable = True
        self.poll_interval = seconds(poll_interval, "poll_interval")
        self.max_poll_interval = seconds(max_poll_interval, "max_poll_interval")
        self.timeout = seconds(timeout, "timeout")
        self.body: str | None = None  # the current round's body, for notifiers' templates
        for parameter in WEBHOOK_PARAMETERS:
            check_webhook_parameter(getattr(self, parameter), parameter)
        if kickoff_id is None or (isinstance(kickoff_id, str) and not kickoff_id.strip()):
            raise CrewConfigurationError("kickoff_id is empty: pass the kickoff task's output.")

    # -- waiting for the crew ------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        kickoff_id = self._kickoff_id()
        context["ti"].xcom_push(key=XCOM_KICKOFF_ID, value=kickoff_id)
        # Start the audit trail empty: it exists (and reads as "no rounds") from the first moment.
        context["ti"].xcom_push(key=XCOM_REVIEW_HISTORY, value=[])
        return self._wait_for_crew(context, kickoff_id)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Back from the crew status trigger: ask the reviewer on a pause, return the output at the end."""
        kickoff_id, result = self._result_from_event(event)
        return self._on_crew_result(context, kickoff_id, result)

    def _on_crew_result(self, context: Context, kickoff_id: str, result: WaitResult) -> Any:
        """Ask the reviewer on a pause; return the output at the end."""
        self._raise_for_outcome(kickoff_id, result)
        status = result.status
        if result.outcome is Outcome.PAUSED and status is not None:
            return self._ask(context, kickoff_id, status)
        history = self._history(context)
        if not history:
            self.log.warning(
                "Crew execution %s finished without pausing for human input: nothing was reviewed. "
                "Tasks pause only when the kickoff gave a human-input webhook.",
                kickoff_id,
            )
        return self._push_result(context, kickoff_id, result)

    def _wait_for_crew(self, context: Context, kickoff_id: str) -> Any:
        # Always stop at the next pause: after an approval a later crew task may ask for review too.
        # _wait defers; it returns only when the wait was over at the first read.
        result = self._wait(context, kickoff_id, wait_for=WaitFor.HUMAN_INPUT, timeout=self.timeout)
        return self._on_crew_result(context, kickoff_id, result)

    def _kickoff_id(self) -> str:
        if not isinstance(self.kickoff_id, str) or not self.kickoff_id.strip():
            raise CrewConfigurationError(
                f"kickoff_id rendered to {self.kickoff_id!r}; it must be the execution's id (a string)."
            )
        return self.kickoff_id.strip()

    # -- asking the reviewer --------------------------------------------------------------------

    def _ask(self, context: Context, kickoff_id: str, status: CrewStatus) -> None:
        """Write the request for this round, notify, and wait for the answer without a worker slot."""
        history = self._history(context)
        round_number = len(history) + 1
        crew_task = _crew_task_name(status)
        request = {
            "round": round_number,
            "kickoff_id": kickoff_id,
            "crew_task_id": status.paused_task_id,
            "crew_task": crew_task,
            "output": status.paused_task_output,
            "subject": self.subject.replace("{task}", crew_task),
            "body": self.review_body(kickoff_id, status, history, round_number),
        }
        context["ti"].xcom_push(key=XCOM_REVIEW_REQUEST, value=request)
        self.log.info(
            "Review round %d: crew execution %s waits for human input on task %r.",
            round_number,
            kickoff_id,
            crew_task,
        )
        self._park(context, request)

    def _park(self, context: Context, request: dict[str, Any]) -> None:
        from airflow.sdk.execution_time.hitl import upsert_hitl_detail

        ti_id = context["task_instance"].id
        # The first call of a try creates the request; later calls only clear the previous answer
        # (Airflow keeps the first subject and body for the whole try).
        upsert_hitl_detail(
            ti_id=ti_id,
            options=list(OPTIONS),
            subject=request["subject"],
            body=request["body"],
            defaults=[APPROVE] if self.approve_on_timeout else None,
            multiple=False,
            params=self._serialized_params(),
            assigned_users=[dict(user) for user in self.assigned_users or []],  # type: ignore[misc]
        )
        self.body = request["body"]
        for notifier in self.notifiers:
            notifier(context)
        kwargs = {
            "kickoff_id": request["kickoff_id"],
            "crew_task_id": request["crew_task_id"],
            "round_number": request["round"],
        }
        if AIRFLOW_V_3_3_PLUS:
            from airflow.sdk.exceptions import TaskAwaitingInput

            raise TaskAwaitingInput(
                method_name="execute_review", kwargs=kwargs, timeout=self.response_timeout
            )
        from airflow.providers.standard.triggers.hitl import HITLTrigger
        from airflow.sdk.timezone import utcnow

        self.defer(
            trigger=HITLTrigger(
                ti_id=ti_id,
                options=list(OPTIONS),
                defaults=[APPROVE] if self.approve_on_timeout else None,
                params=self._serialized_params(),
                multiple=False,
                timeout_datetime=utcnow() + self.response_timeout if self.response_timeout else None,
            ),
            method_name="execute_review",
            kwargs=kwargs,
        )

    def _serialized_params(self) -> dict[str, Any]:
        from airflow.sdk.definitions.param import Param, ParamsDict

        params = ParamsDict(
            {
                FEEDBACK_PARAM: Param(
                    "",
                    type=["string", "null"],
                    title="Feedback",
                    description="What the crew should change (required with 'Request changes'); "
                    "optional context with 'Approve'.",
                )
            }
        )
        from airflow.providers.standard.version_compat import AIRFLOW_V_3_1_3_PLUS

        if not AIRFLOW_V_3_1_3_PLUS:
            return params.dump()
        return {key: params.get_param(key).serialize() for key in params}

    # -- the answer ------------------------------------------------------------------------------

    def execute_review(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        *,
        kickoff_id: str,
        crew_task_id: str,
        round_number: int,
    ) -> None:
        """Back from the human-in-the-loop wait: send the answer to the crew, then wait for it again.

        :param event: The human-in-the-loop event (answer, or an error such as a time-out).
        :param kickoff_id: The execution under review.
        :param crew_task_id: The paused crew task the answer is about.
        :param round_number: Which review round this answer closes.
        """
        answer = self._answer_from_event(event, kickoff_id, crew_task_id)
        history = self._history(context)
        entry: dict[str, Any] = {
            "round": round_number,
            "crew_task_id": crew_task_id,
            "output": (self._current_request(context) or {}).get("output"),
            **answer,
        }
        if not answer["is_approve"] and not answer["feedback"].strip():
            # Nothing to retry with: keep the execution paused and ask again. Not sent to the crew.
            entry["applied"] = False
            entry["note"] = "Request changes without feedback: not sent; asked again."
            self._append_history(context, history, entry)
            self.log.warning("Round %d: changes were requested without feedback; asking again.", round_number)
            request = dict(self._current_request(context) or {})
            request["round"] = len(history) + 1
            context["ti"].xcom_push(key=XCOM_REVIEW_REQUEST, value=request)
            return self._park(context, request)

        feedback = answer["feedback"].strip() or (
            f"Approved automatically: no answer within {self.response_timeout}."
            if answer["timed_out"]
            else APPROVED_WITHOUT_TEXT
        )
        entry["feedback"] = feedback
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        webhooks = self._webhook_addresses(context, kickoff_id)
        try:
            result = hook.resume(kickoff_id, crew_task_id, feedback, answer["is_approve"], **webhooks)
        except CrewBadRequestError as error:
            # Someone resumed it elsewhere, or it ended: record that and follow the execution.
            entry.update(applied=False, note=f"Not applied: {error.service_message or error}")
            self._append_history(context, history, entry)
            self.log.warning("Round %d: the crew did not accept the answer: %s", round_number, error)
            return self._wait_for_crew(context, kickoff_id)
        entry.update(applied=True, resume_status=result.status.value, resume_message=result.message)
        self._append_history(context, history, entry)
        self.log.info(
            "Round %d: %s by %s; crew execution %s %s.",
            round_number,
            APPROVE if answer["is_approve"] else REQUEST_CHANGES,
            (answer["responded_by"] or {}).get("name", "nobody (time-out default)"),
            kickoff_id,
            result.status.value,
        )
        self._let_stale_pause_pass(hook, kickoff_id, crew_task_id, entry["output"])
        return self._wait_for_crew(context, kickoff_id)

    def _answer_from_event(self, event: Any, kickoff_id: str, crew_task_id: str) -> dict[str, Any]:
        if not isinstance(event, Mapping):
            raise CrewError(f"Expected a human-in-the-loop event, got {event!r}.")
        if "error" in event:
            if event.get("error_type") == "timeout":
                raise CrewReviewTimeoutError(
                    f"No review answer within response_timeout={self.response_timeout}. Crew execution "
                    f"{kickoff_id} is still waiting for human input on task {crew_task_id!r}: clear this "
                    "task to ask again, or resume it with CrewResumeOperator."
                )
            raise CrewError(f"The review request failed ({event.get('error_type')}): {event.get('error')}")
        chosen = list(event.get("chosen_options") or [])
        if len(chosen) != 1 or chosen[0] not in OPTIONS:
            raise CrewError(f"Expected exactly one of {OPTIONS} as the answer, got {chosen!r}.")
        params_input = event.get("params_input") or {}
        responded_at = event.get("responded_at")
        return {
            "is_approve": chosen[0] == APPROVE,
            "answer": chosen[0],
            "feedback": str(params_input.get(FEEDBACK_PARAM) or ""),
            "responded_by": event.get("responded_by_user"),
            "responded_at": responded_at.isoformat() if isinstance(responded_at, datetime) else responded_at,
            "timed_out": bool(event.get("timedout")),
        }

    def _let_stale_pause_pass(
        self, hook: CrewHook, kickoff_id: str, crew_task_id: str, output: str | None
    ) -> None:
        """Poll briefly while the service still shows the pause just answered (bounded, usually 1 poll)."""
        deadline = time.monotonic() + STALE_PAUSE_GRACE
        while time.monotonic() < deadline:
            try:
                status = hook.get_status(kickoff_id)
            except CrewError:
                return  # the trigger's wait handles errors and 404s properly
            stale = (
                status.state is CrewState.WAITING_FOR_HUMAN_INPUT
                and status.paused_task_id == crew_task_id
                and status.paused_task_output == output
            )
            if not stale:
                return
            time.sleep(min(self.poll_interval, 2.0))
        self.log.warning("Crew execution %s still shows the answered pause; waiting anyway.", kickoff_id)

    # -- XCom: the audit trail ---------------------------------------------------------------

    def _pull(self, context: Context, key: str) -> Any:
        ti = context["ti"]
        return ti.xcom_pull(task_ids=self.task_id, key=key, map_indexes=ti.map_index)

    def _history(self, context: Context) -> list[dict[str, Any]]:
        value = self._pull(context, XCOM_REVIEW_HISTORY)
        return list(value) if isinstance(value, list) else []

    def _current_request(self, context: Context) -> dict[str, Any] | None:
        value = self._pull(context, XCOM_REVIEW_REQUEST)
        return value if isinstance(value, dict) else None

    def _append_history(self, context: Context, history: list[dict[str, Any]], entry: dict[str, Any]) -> None:
        history.append(entry)
        context["ti"].xcom_push(key=XCOM_REVIEW_HISTORY, value=history)

    # -- the request text -------------------------------------------------------------------------

    def review_body(
        self, kickoff_id: str, status: CrewStatus, history: list[dict[str, Any]], round_number: int
    ) -> str:
        """The Markdown the reviewer reads: output, inputs, progress, earlier feedback, how to answer.

        :param kickoff_id: The execution under review.
        :param status: The status record of the pause.
        :param history: Earlier rounds of this task try.
        :param round_number: The round being asked.
        """
        crew_task = _crew_task_name(status)
        lines = [
            f"Crew execution `{kickoff_id}` is waiting for your review of task **{crew_task}** "
            f"(review round {round_number}).",
            "",
            "### Output",
            "",
            _fenced(status.paused_task_output or "(the service reported no output)"),
            "",
        ]
        if isinstance(self.inputs, Mapping) and self.inputs:
            lines += ["### Inputs", ""]
            lines += [f"- **{_inline(name)}**: {_inline(value)}" for name, value in self.inputs.items()]
            lines.append("")
        if status.progress and (progress := status.progress.describe()):
            lines += ["### Progress", "", progress, ""]
        earlier = [entry for entry in history if entry.get("feedback")]
        if earlier:
            lines += ["### Earlier feedback", ""]
            for entry in earlier:
                who = (entry.get("responded_by") or {}).get("name") or "time-out default"
                lines.append(
                    f"{entry['round']}. {entry.get('answer')} by {_inline(who)}: {_inline(entry['feedback'])}"
                )
            lines.append("")
        lines += [
            "### How to answer",
            "",
            f"- **{APPROVE}**: the crew continues (feedback optional, added as context).",
            f"- **{REQUEST_CHANGES}**: say what to change in *Feedback* (required); the crew redoes the "
            "task with it and this task asks again.",
            f"- {self._timeout_text()}",
            "",
            "Airflow keeps the text of this request for the whole task try: after you request changes, "
            f"read the redone output in this task's XCom `{XCOM_REVIEW_REQUEST}` before answering again.",
        ]
        return "\n".join(lines)

    def _timeout_text(self) -> str:
        if self.response_timeout is None:
            return "No time limit."
        if self.approve_on_timeout:
            return f"Without an answer within {self.response_timeout}, the output is approved."
        return (
            f"Without an answer within {self.response_timeout}, this task fails and the crew execution "
            "stays paused."
        )

    # -- webhooks ---------------------------------------------------------------------------------

    def _webhook_addresses(self, context: Context, execution_id: str) -> dict[str, str | None]:
        return resume_webhook_addresses(
            context,
            execution_id,
            given={name: getattr(self, name) or None for name in WEBHOOK_PARAMETERS},
            kickoff_task_id=self.kickoff_task_id,
            carry_over=self.carry_over_webhooks,
            log=self.log,
        )


def _crew_task_name(status: CrewStatus) -> str:
    last = status.raw.get("last_executed_task")
    name = last.get("name") if isinstance(last, Mapping) else None
    return str(name or status.paused_task_id or "?")


def _fenced(text: str) -> str:
    """A code fence longer than any backtick run in the text, so the output shows verbatim."""
    if len(text) > OUTPUT_BODY_LIMIT:
        text = f"{text[:OUTPUT_BODY_LIMIT]}\n… ({len(text) - OUTPUT_BODY_LIMIT} more characters in XCom)"
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _inline(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return " ".join(text.split()).replace("|", "\\|")


__all__ = ["CrewHumanReviewOperator", "CrewReviewTimeoutError"]
