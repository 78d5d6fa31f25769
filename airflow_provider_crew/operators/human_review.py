"""Human review of a paused crew execution in Airflow's human-in-the-loop UI: one task per round.

:func:`crew_human_review` lays out a task group: ``round_1`` … ``round_<max_rounds>``
(:class:`CrewReviewRoundOperator`) and ``result`` (:class:`CrewReviewResultOperator`). Each round
is its own task instance, so each has its own request in the Required Actions page, showing the
output it asks about, and its own answer, reviewer and time in Airflow's records:

1. the round waits (deferred) until the execution pauses for human input, or skips when it
   finished without another pause;
2. it writes the request (this round's output, the inputs, the earlier rounds' feedback) and waits
   for the answer without a worker slot;
3. it checks that the execution still waits on that output, sends the answer with ``POST /resume``
   and ends. No task defers again after a resume in the same try, which keeps every resume clear of
   Airflow's stale executor-event race (see :func:`~airflow_provider_crew._compat.deferral_settle_seconds`).

``result`` waits for the execution to finish and returns its output, with every round's record in
XCom ``review_history``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from airflow_provider_crew._compat import (
    AirflowFailException,
    AirflowSkipException,
    BaseOperator,
    hitl_params,
    park_for_human_input,
    require_human_in_the_loop,
)
from airflow_provider_crew.exceptions import (
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.links.crew import CrewExecutionLink
from airflow_provider_crew.models import CrewState, CrewStatus
from airflow_provider_crew.openlineage import CrewOpenLineageMixin
from airflow_provider_crew.operators.base import (
    XCOM_KICKOFF_ID,
    XCOM_STATUS,
    CrewWaitMixin,
    checked_kickoff_id,
    upstream_task_id,
)
from airflow_provider_crew.operators.crew import (
    DEFAULT_TIMEOUT,
    WEBHOOK_PARAMETERS,
    check_webhook_parameter,
    resume_webhook_addresses,
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
DEFAULT_MAX_ROUNDS = 3

XCOM_REVIEW_REQUEST = "review_request"
XCOM_REVIEW_HISTORY = "review_history"

# After POST /resume a service may still report the old pause for a moment; a pause with the same
# task and output within this window is that stale record, not a new round.
STALE_PAUSE_GRACE = 30.0
OUTPUT_BODY_LIMIT = 20_000

NEEDS_3_1 = (
    "Human review in the Airflow UI needs Airflow 3.1+ (it uses Airflow's human-in-the-loop API); this "
    "is Airflow {version}. On 3.0, use CrewKickoffOperator(on_human_input='return') and CrewResumeOperator."
)
REPLACED = (
    "CrewHumanReviewOperator was replaced by crew_human_review(...), a task group with one task per "
    "review round (each round keeps its own request and answer). Import it from "
    "airflow_provider_crew.operators.human_review."
)


class CrewReviewTimeoutError(AirflowFailException):
    """Nobody answered a review request within ``response_timeout``; the execution stays paused."""


class CrewReviewRoundsExhaustedError(AirflowFailException):
    """The crew wants (another) review but every round of the task group is used."""


def _check_airflow_supports_review() -> None:
    require_human_in_the_loop(NEEDS_3_1)


def round_task_id(round_number: int) -> str:
    """The task id (within the group) of review round ``round_number``."""
    return f"round_{round_number}"


class _ReviewTask(CrewOpenLineageMixin, CrewWaitMixin, BaseOperator):
    """What rounds and the result share: the execution, the connection, the polling settings, the
    "Crew execution" link and the lineage facets."""

    template_fields: Sequence[str] = ("kickoff_id", "inputs")
    operator_extra_links = (CrewExecutionLink(),)
    template_fields_renderers: ClassVar[dict[str, str]] = {"inputs": "json"}

    def __init__(
        self,
        *,
        kickoff_id: str | Any,
        round_task_ids: Sequence[str],
        crew_conn_id: str = CrewHook.default_conn_name,
        inputs: Mapping[str, Any] | Any | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        openlineage_include_values: bool = False,
        **kwargs: Any,
    ) -> None:
        _check_airflow_supports_review()
        super().__init__(**kwargs)
        if kickoff_id is None or (isinstance(kickoff_id, str) and not kickoff_id.strip()):
            raise CrewConfigurationError("kickoff_id is empty: pass the kickoff task's output.")
        self.kickoff_id = kickoff_id
        self.round_task_ids = list(round_task_ids)
        self.crew_conn_id = crew_conn_id
        self.inputs = inputs
        self.openlineage_include_values = openlineage_include_values
        # Waiting never holds a worker slot: the trigger waits for the crew, Airflow's
        # human-in-the-loop machinery for the reviewer.
        self.deferrable = True
        self._set_wait_timing(
            poll_interval=poll_interval, max_poll_interval=max_poll_interval, timeout=timeout
        )
        # The kickoff task, when kickoff_id is its output: its XCom says when the execution started
        # (the 404 grace counts from then) and which webhook addresses to carry over.
        self.kickoff_task_id: str | None = upstream_task_id(kickoff_id)

    def _start(self, context: Context) -> str:
        """The checked kickoff id, pushed to XCom with the execution's page URL before any waiting."""
        kickoff_id = checked_kickoff_id(self.kickoff_id)
        context["ti"].xcom_push(key=XCOM_KICKOFF_ID, value=kickoff_id)
        self._record_execution(context, CrewHook(crew_conn_id=self.crew_conn_id), kickoff_id)
        return kickoff_id

    def _rounds_before(self, context: Context, task_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records of the given rounds that ran, in order (a skipped round has none)."""
        if not task_ids:
            return []
        ti = context["ti"]
        values = ti.xcom_pull(task_ids=list(task_ids), map_indexes=ti.map_index)
        if not isinstance(values, list):
            values = [values]
        return [value for value in values if isinstance(value, dict) and "round" in value]


class CrewReviewRoundOperator(_ReviewTask):
    """
    One review round: wait for the execution to pause, ask the reviewer, send the answer to the crew.

    Made by :func:`crew_human_review`, which lays out the rounds and the result task. The round
    skips when the execution finished without (another) pause. Its return value is the round's record
    (see docs/human-review.md); the request it wrote is in XCom ``review_request``.

    :param kickoff_id: The execution to review (templated), usually ``kickoff.output``.
    :param round_number: Which round this is (1-based).
    :param round_task_ids: Task ids of every round of the group, in order.
    :param crew_conn_id: The ``crew`` connection the execution was started with.
    :param inputs: The crew's inputs, shown to the reviewer (templated; optional).
    :param subject: Headline of the request; ``{task}`` is replaced by the paused crew task.
    :param assigned_users: Who may answer (``{"id": ..., "name": ...}`` or a list).
    :param notifiers: Notifiers called when the request is written (``task.body`` is its text).
    :param response_timeout: How long the round waits for an answer; then it fails and the
        execution stays paused, unless ``approve_on_timeout``.
    :param approve_on_timeout: Approve when ``response_timeout`` passes without an answer.
    :param task_webhook_url: Task-completion webhook to send with the resume.
    :param step_webhook_url: Agent-step webhook to send with the resume.
    :param crew_webhook_url: Crew-completion webhook to send with the resume.
    :param carry_over_webhooks: Re-send the kickoff's webhook addresses at resume (the service
        forgets them otherwise; docs/contract.md, "Resume").
    :param kickoff_task_id: The kickoff task whose webhook addresses to carry over; found from
        ``kickoff_id=kickoff.output`` when not given.
    :param poll_interval: First seconds between status polls.
    :param max_poll_interval: Longest seconds between status polls.
    :param timeout: Longest wait for the execution to pause or finish.
    :xcom return_value: This round's record (round, crew_task_id, crew_task, output, answer,
        is_approve, feedback, responded_by, responded_at, timed_out, applied, and resume_status or
        note); none when the round is skipped.
    :param openlineage_include_values: With the OpenLineage provider installed, also send input values
        and the output in lineage events (off: they may be private).
    :xcom kickoff_id: The execution under review.
    :xcom execution_url: The execution's page, when the connection has an execution page URL.
    :xcom review_request: The request this round wrote (round, kickoff_id, crew_task_id, crew_task,
        output, subject, body).
    :xcom status: The last status record, when the execution finished before this round.
    """

    template_fields: Sequence[str] = (
        "kickoff_id",
        "inputs",
        "task_webhook_url",
        "step_webhook_url",
        "crew_webhook_url",
    )
    ui_color = "#fde2e4"

    def __init__(
        self,
        *,
        round_number: int,
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 1 <= round_number <= len(self.round_task_ids):
            raise CrewConfigurationError(
                f"round_number must be between 1 and {len(self.round_task_ids)}, got {round_number!r}."
            )
        self.round_number = round_number
        self.subject = subject
        self.assigned_users: list[Mapping[str, str]] = (
            [assigned_users] if isinstance(assigned_users, Mapping) else list(assigned_users or [])
        )
        self.notifiers: list[BaseNotifier] = (
            list(notifiers) if isinstance(notifiers, Sequence) else [notifiers] if notifiers else []
        )
        if response_timeout is not None and not isinstance(response_timeout, timedelta):
            raise CrewConfigurationError(
                f"response_timeout must be a timedelta, got {response_timeout!r}. "
                "Write e.g. response_timeout=timedelta(hours=24)."
            )
        if approve_on_timeout and response_timeout is None:
            raise CrewConfigurationError("approve_on_timeout=True needs a response_timeout.")
        self.response_timeout = response_timeout
        self.approve_on_timeout = approve_on_timeout
        self.task_webhook_url = task_webhook_url
        self.step_webhook_url = step_webhook_url
        self.crew_webhook_url = crew_webhook_url
        for parameter in WEBHOOK_PARAMETERS:
            check_webhook_parameter(getattr(self, parameter), parameter)
        self.carry_over_webhooks = carry_over_webhooks
        self.kickoff_task_id = kickoff_task_id or self.kickoff_task_id
        self.body: str | None = None  # this round's request text, for notifiers' templates

    @property
    def is_last_round(self) -> bool:
        return self.round_number == len(self.round_task_ids)

    # -- waiting for the crew ------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        kickoff_id = self._start(context)
        # _wait defers; it returns only when the wait was over at the first read.
        result = self._wait(context, kickoff_id, wait_for=WaitFor.HUMAN_INPUT, timeout=self.timeout)
        return self._on_crew_result(context, kickoff_id, result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Back from the crew status trigger: ask on a pause, skip when the execution finished."""
        kickoff_id, result = self._result_from_event(event)
        return self._on_crew_result(context, kickoff_id, result)

    def _on_crew_result(self, context: Context, kickoff_id: str, result: WaitResult) -> dict[str, Any]:
        self._raise_for_outcome(kickoff_id, result)
        status = result.last_status
        if result.outcome is Outcome.PAUSED and status is not None:
            self._ask(context, kickoff_id, status)  # parks: returns only through execute_review
        if status is not None:
            context["ti"].xcom_push(key=XCOM_STATUS, value=status.raw)
        if not self._rounds_before(context, self.round_task_ids[: self.round_number - 1]):
            self.log.warning(
                "Crew execution %s finished without pausing for human input: nothing was reviewed. "
                "Tasks pause only when the kickoff gave a human-input webhook.",
                kickoff_id,
            )
        raise AirflowSkipException(
            f"Crew execution {kickoff_id} finished: no review round {self.round_number}."
        )

    # -- asking the reviewer --------------------------------------------------------------------

    def _ask(self, context: Context, kickoff_id: str, status: CrewStatus) -> NoReturn:
        """Write this round's request and wait for the answer without a worker slot."""
        earlier = self._rounds_before(context, self.round_task_ids[: self.round_number - 1])
        crew_task = crew_task_name(status)
        subject = self.subject.replace("{task}", crew_task)
        request: dict[str, Any] = {
            "round": self.round_number,
            "kickoff_id": kickoff_id,
            "crew_task_id": status.paused_task_id,
            "crew_task": crew_task,
            "output": status.paused_task_output,
            "subject": f"{subject} (round {self.round_number} of {len(self.round_task_ids)})",
            "body": self.review_body(kickoff_id, status, earlier, retried=_try_number(context) > 1),
        }
        context["ti"].xcom_push(key=XCOM_REVIEW_REQUEST, value=request)
        self.body = request["body"]
        self.log.info(
            "Review round %d: crew execution %s waits for human input on task %r. Output under review:\n%s",
            self.round_number,
            kickoff_id,
            crew_task,
            _truncate(status.paused_task_output, 2000),
        )
        for notifier in self.notifiers:
            notifier(context)
        park_for_human_input(
            self,
            context,
            options=list(OPTIONS),
            subject=request["subject"],
            body=request["body"],
            defaults=[APPROVE] if self.approve_on_timeout else None,
            params=self._params(),
            assigned_users=[dict(user) for user in self.assigned_users],
            response_timeout=self.response_timeout,
            method_name="execute_review",
            kwargs=self._resume_kwargs({"kickoff_id": kickoff_id, "crew_task_id": status.paused_task_id}),
        )

    @staticmethod
    def _params() -> dict[str, Any]:
        from airflow.sdk.definitions.param import Param

        return hitl_params(
            {
                FEEDBACK_PARAM: Param(
                    "",
                    type=["string", "null"],
                    title="Feedback",
                    description="Required with 'Request changes': what the crew should change. Optional "
                    "with 'Approve': added to the crew's context.",
                )
            }
        )

    # -- the answer ------------------------------------------------------------------------------

    def execute_review(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        *,
        kickoff_id: str,
        crew_task_id: str,
    ) -> dict[str, Any]:
        """Back from the human-in-the-loop wait: send the answer to the crew and end the round.

        :param event: The human-in-the-loop event (answer, or an error such as a time-out).
        :param kickoff_id: The execution under review.
        :param crew_task_id: The paused crew task the answer is about.
        """
        request = self._pull(context, XCOM_REVIEW_REQUEST) or {}
        answer = self._answer_from_event(event, kickoff_id, crew_task_id)
        record: dict[str, Any] = {
            "round": self.round_number,
            "crew_task_id": crew_task_id,
            "crew_task": request.get("crew_task"),
            "output": request.get("output"),
            **answer,
            "applied": False,
        }
        if not answer["is_approve"]:
            if not answer["feedback"].strip():
                return self._not_sent(
                    record, "Changes were requested without feedback, so nothing was sent to the crew."
                )
            if self.is_last_round:
                self._not_sent(record, "Changes were requested in the last review round.")
                raise CrewReviewRoundsExhaustedError(
                    f"All {len(self.round_task_ids)} review rounds are used and round {self.round_number} "
                    f"asked for changes: crew execution {kickoff_id} stays paused on task "
                    f"{request.get('crew_task') or crew_task_id!r}, the feedback was not sent. To go on, "
                    "raise max_rounds and clear this task, or resume the execution with CrewResumeOperator."
                )
        record["feedback"] = answer["feedback"].strip() or (
            f"Approved automatically: no answer within {self.response_timeout}."
            if answer["timed_out"]
            else APPROVED_WITHOUT_TEXT
        )
        hook = CrewHook(crew_conn_id=self.crew_conn_id)
        moved_on = self._moved_on(hook, kickoff_id, crew_task_id, record["output"])
        if moved_on:
            return self._not_sent(record, moved_on)
        try:
            result = hook.resume(
                kickoff_id,
                crew_task_id,
                record["feedback"],
                answer["is_approve"],
                **self._webhook_addresses(context, kickoff_id),
            )
        except CrewBadRequestError as error:
            return self._not_sent(
                record, f"The crew did not accept the answer: {error.service_message or error}"
            )
        record.update(applied=True, resume_status=result.status.value, resume_message=result.message)
        self.log.info(
            "Round %d: %s by %s; crew execution %s %s.",
            self.round_number,
            answer["answer"],
            (answer["responded_by"] or {}).get("name", "nobody (time-out default)"),
            kickoff_id,
            result.status.value,
        )
        self._let_stale_pause_pass(hook, kickoff_id, crew_task_id, record["output"])
        return record

    def _not_sent(self, record: dict[str, Any], why: str) -> dict[str, Any]:
        record["note"] = why
        self.log.warning("Round %d: the answer was not applied. %s", self.round_number, why)
        return record

    def _moved_on(self, hook: CrewHook, kickoff_id: str, crew_task_id: str, output: str | None) -> str | None:
        """Why the answer must not be sent, when the execution no longer waits on the reviewed output."""
        try:
            status = hook.get_status(kickoff_id)
        except CrewError as error:
            self.log.warning("Could not read the status before resuming (%s); sending the answer.", error)
            return None
        if status.state is CrewState.WAITING_FOR_HUMAN_INPUT and status.paused_task_id == crew_task_id:
            if status.paused_task_output == output:
                return None
            return (
                f"The execution now waits on a different output of task {crew_task_id!r} than the one "
                "reviewed (resumed elsewhere?); the answer would apply to text the reviewer never saw."
            )
        return f"The execution moved on before the answer arrived (now: {status.describe()})."

    def _answer_from_event(self, event: Any, kickoff_id: str, crew_task_id: str) -> dict[str, Any]:
        if not isinstance(event, Mapping):
            raise CrewError(f"Expected a human-in-the-loop event, got {event!r}.")
        if "error" in event:
            if event.get("error_type") == "timeout":
                raise CrewReviewTimeoutError(
                    f"No review answer within {_duration(self.response_timeout or timedelta())} "
                    f"(response_timeout). Crew execution "
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
            "answer": chosen[0],
            "is_approve": chosen[0] == APPROVE,
            "feedback": str(params_input.get(FEEDBACK_PARAM) or ""),
            "responded_by": event.get("responded_by_user"),
            "responded_at": responded_at.isoformat() if isinstance(responded_at, datetime) else responded_at,
            "timed_out": bool(event.get("timedout")),
        }

    def _let_stale_pause_pass(
        self, hook: CrewHook, kickoff_id: str, crew_task_id: str, output: str | None
    ) -> None:
        """Poll briefly while the service still shows the pause just answered (bounded, usually 1 poll).

        The next round starts from the first status it reads: it must not take this stale record for
        a new pause.
        """
        deadline = time.monotonic() + STALE_PAUSE_GRACE
        while time.monotonic() < deadline:
            try:
                status = hook.get_status(kickoff_id)
            except CrewError:
                return  # the next round's wait handles errors and 404s properly
            stale = (
                status.state is CrewState.WAITING_FOR_HUMAN_INPUT
                and status.paused_task_id == crew_task_id
                and status.paused_task_output == output
            )
            if not stale:
                return
            time.sleep(min(self.poll_interval, 1.0))
        self.log.warning("Crew execution %s still shows the answered pause.", kickoff_id)

    def _pull(self, context: Context, key: str) -> Any:
        ti = context["ti"]
        return ti.xcom_pull(task_ids=self.task_id, key=key, map_indexes=ti.map_index)

    def _webhook_addresses(self, context: Context, kickoff_id: str) -> dict[str, str | None]:
        return resume_webhook_addresses(
            context,
            kickoff_id,
            given={name: getattr(self, name) or None for name in WEBHOOK_PARAMETERS},
            kickoff_task_id=self.kickoff_task_id,
            carry_over=self.carry_over_webhooks,
            log=self.log,
        )

    # -- the request text -------------------------------------------------------------------------

    def review_body(
        self, kickoff_id: str, status: CrewStatus, earlier: list[dict[str, Any]], *, retried: bool = False
    ) -> str:
        """The Markdown the reviewer reads: why it asks, the output, inputs, progress, earlier rounds.

        :param kickoff_id: The execution under review.
        :param status: The status record of the pause.
        :param earlier: The records of the earlier rounds, in order.
        :param retried: Whether an earlier try of this round ended without an answer being applied.
        """
        crew_task = crew_task_name(status)
        total = len(self.round_task_ids)
        lines = [
            f"**Review round {self.round_number} of {total}**: crew execution `{kickoff_id}` waits for your "
            f"review of task **{_inline(crew_task)}**.",
            "",
        ]
        last = earlier[-1] if earlier else None
        if last is not None and not last.get("applied"):
            lines += [
                f"> **Asked again:** round {last['round']}'s answer was not applied. {last.get('note', '')}",
                "",
            ]
        elif retried:
            lines += [
                "> **Asked again:** an earlier try of this round ended before an answer was applied.",
                "",
            ]
        lines += [
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
        if earlier:
            lines += ["### Earlier rounds", ""]
            for record in earlier:
                who = (record.get("responded_by") or {}).get("name") or "time-out default"
                outcome = "" if record.get("applied") else " (not applied)"
                feedback = record.get("feedback") or "(no feedback)"
                answer = record.get("answer")
                lines.append(f"{record['round']}. {answer} by {_inline(who)}{outcome}: {_inline(feedback)}")
            lines.append("")
        lines += [
            "### How to answer",
            "",
            f"- **{APPROVE}**: the crew continues (feedback optional, added as context).",
        ]
        if self.is_last_round:
            lines.append(
                f"- **{REQUEST_CHANGES}**: this is the last review round, so the feedback is *not* sent: the "
                "task fails and the crew stays paused until someone raises max_rounds or resumes it."
            )
        else:
            lines.append(
                f"- **{REQUEST_CHANGES}**: say what to change in *Feedback* (required); the crew redoes the "
                f"task with it and round {self.round_number + 1} asks you about the new output."
            )
        lines.append(f"- {self._timeout_text()}")
        return "\n".join(lines)

    def _timeout_text(self) -> str:
        if self.response_timeout is None:
            return "No time limit."
        within = _duration(self.response_timeout)
        if self.approve_on_timeout:
            return f"Without an answer within {within}, the output is approved."
        return f"Without an answer within {within}, this task fails and the crew execution stays paused."


class CrewReviewResultOperator(_ReviewTask):
    """
    The end of a review: wait for the execution to finish and return its final output.

    Runs after the rounds (``trigger_rule="none_failed"``: skipped rounds are fine). Pushes every
    round's record to XCom ``review_history`` before waiting, and the final output to ``output``.
    Fails when the execution pauses again after the last round, leaving it paused.

    :param kickoff_id: The execution (templated), usually ``kickoff.output``.
    :param round_task_ids: Task ids of every round of the group, in order.
    :param crew_conn_id: The ``crew`` connection.
    :param inputs: The crew's inputs (templated; optional), as the rounds show them.
    :param poll_interval: First seconds between status polls.
    :param max_poll_interval: Longest seconds between status polls.
    :param timeout: Longest wait for the execution to finish.
    :param openlineage_include_values: With the OpenLineage provider installed, also send input values
        and the output in lineage events (off: they may be private).
    :xcom return_value: The execution's final output.
    :xcom output: The same final output.
    :xcom kickoff_id: The execution.
    :xcom execution_url: The execution's page, when the connection has an execution page URL.
    :xcom review_history: Every round's record, in order.
    :xcom status: The last status record.
    """

    ui_color = "#e9d8fd"

    def execute(self, context: Context) -> Any:
        kickoff_id = self._start(context)
        ti = context["ti"]
        ti.xcom_push(key=XCOM_REVIEW_HISTORY, value=self._rounds_before(context, self.round_task_ids))
        result = self._wait(context, kickoff_id, wait_for=WaitFor.HUMAN_INPUT, timeout=self.timeout)
        return self._finish(context, kickoff_id, result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        kickoff_id, result = self._result_from_event(event)
        return self._finish(context, kickoff_id, result)

    def _finish(self, context: Context, kickoff_id: str, result: WaitResult) -> Any:
        self._raise_for_outcome(kickoff_id, result)
        status = result.last_status
        if result.outcome is Outcome.PAUSED and status is not None:
            context["ti"].xcom_push(key=XCOM_STATUS, value=status.raw)
            raise CrewReviewRoundsExhaustedError(
                f"Crew execution {kickoff_id} paused for human input again, on task "
                f"{crew_task_name(status)!r}, after all {len(self.round_task_ids)} review rounds: it stays "
                "paused. Raise max_rounds of crew_human_review and clear this task group, or resume the "
                "execution with CrewResumeOperator."
            )
        return self._push_result(context, kickoff_id, result)


def crew_human_review(
    *,
    kickoff_id: str | Any,
    group_id: str = "review",
    max_rounds: int = DEFAULT_MAX_ROUNDS,
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
    retries: int = 1,
    retry_delay: timedelta = timedelta(seconds=5),
    openlineage_include_values: bool = False,
) -> CrewReviewResultOperator:
    """
    Lay out a human review of a crew execution: a task group of ``max_rounds`` rounds and a result.

    Each round is its own task (``<group_id>.round_<n>``) with its own request in the Required Actions
    page; rounds after the crew finished are skipped. Returns the ``<group_id>.result`` task: its
    output is the execution's final output, XCom ``review_history`` has every round's record.

    :param kickoff_id: The execution to review (templated), usually ``kickoff.output``.
    :param group_id: The task group's id.
    :param max_rounds: How many requests at most (each "Request changes" uses one round).
    :param crew_conn_id: The ``crew`` connection the execution was started with.
    :param inputs: The crew's inputs, shown to the reviewer (templated; optional).
    :param subject: Headline of each request; ``{task}`` is replaced by the paused crew task.
    :param assigned_users: Who may answer (``{"id": ..., "name": ...}`` or a list).
    :param notifiers: Notifiers called when a round writes its request.
    :param response_timeout: How long each round waits for an answer.
    :param approve_on_timeout: Approve when ``response_timeout`` passes without an answer.
    :param task_webhook_url: Task-completion webhook to send with every resume.
    :param step_webhook_url: Agent-step webhook to send with every resume.
    :param crew_webhook_url: Crew-completion webhook to send with every resume.
    :param carry_over_webhooks: Re-send the kickoff's webhook addresses at every resume.
    :param kickoff_task_id: The kickoff task whose webhook addresses to carry over.
    :param poll_interval: First seconds between status polls.
    :param max_poll_interval: Longest seconds between status polls.
    :param timeout: Longest wait for each pause and for the end.
    :param retries: Retries of each task. A round that fails before its answer was applied asks
        again on its retry; one that applied its answer follows the execution.
    :param retry_delay: How soon a retry runs. Short, because a failed round leaves a reviewer
        waiting: on Airflow 3.3 an answer given within seconds of the request can get the round
        failed by Airflow (docs/human-review.md), and the retry asks again.
    :param openlineage_include_values: With the OpenLineage provider installed, also send input values
        and outputs in the lineage events of the group's tasks.
    """
    _check_airflow_supports_review()
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise CrewConfigurationError(f"max_rounds must be a whole number of 1 or more, got {max_rounds!r}.")
    from airflow.sdk import TaskGroup, chain

    common: dict[str, Any] = {
        "kickoff_id": kickoff_id,
        "crew_conn_id": crew_conn_id,
        "inputs": inputs,
        "poll_interval": poll_interval,
        "max_poll_interval": max_poll_interval,
        "timeout": timeout,
        "retries": retries,
        "retry_delay": retry_delay,
        "openlineage_include_values": openlineage_include_values,
    }
    with TaskGroup(group_id=group_id) as group:
        round_ids = [group.child_id(round_task_id(number)) for number in range(1, max_rounds + 1)]
        rounds = [
            CrewReviewRoundOperator(
                task_id=round_task_id(number),
                round_number=number,
                round_task_ids=round_ids,
                subject=subject,
                assigned_users=assigned_users,
                notifiers=notifiers,
                response_timeout=response_timeout,
                approve_on_timeout=approve_on_timeout,
                task_webhook_url=task_webhook_url,
                step_webhook_url=step_webhook_url,
                crew_webhook_url=crew_webhook_url,
                carry_over_webhooks=carry_over_webhooks,
                kickoff_task_id=kickoff_task_id or upstream_task_id(kickoff_id),
                **common,
            )
            for number in range(1, max_rounds + 1)
        ]
        result = CrewReviewResultOperator(
            task_id="result", round_task_ids=round_ids, trigger_rule="none_failed", **common
        )
        chain(*rounds, result)
    return result


def crew_task_name(status: CrewStatus) -> str:
    """The paused crew task's name as the reviewer knows it (its id when the service gives no name)."""
    last = status.raw.get("last_executed_task")
    name = last.get("name") if isinstance(last, Mapping) else None
    return str(name or status.paused_task_id or "?")


def _duration(value: timedelta) -> str:
    """``24 hours``, ``90 minutes``, ``45 seconds``: how a person says a time limit."""
    total = int(value.total_seconds())
    for unit, size in (("hour", 3600), ("minute", 60)):
        if total >= size and total % size == 0:
            count = total // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{total} second{'s' if total != 1 else ''}"


def _try_number(context: Context) -> int:
    return int(getattr(context["ti"], "try_number", 1) or 1)


def _truncate(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


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


def __getattr__(name: str) -> Any:
    if name == "CrewHumanReviewOperator":
        raise ImportError(REPLACED)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CrewReviewResultOperator",
    "CrewReviewRoundOperator",
    "CrewReviewRoundsExhaustedError",
    "CrewReviewTimeoutError",
    "crew_human_review",
]
