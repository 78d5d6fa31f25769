"""A review round (:class:`CrewReviewRoundOperator`) ends right after ``POST /resume``: no task defers
again after a resume in the same try, which keeps every resume clear of Airflow's stale executor-event
race (:func:`~airflow_provider_crew.waiting.race.deferral_settle_seconds`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

import airflow_provider_crew.review.answer as answer
import airflow_provider_crew.review.request as request
from airflow_provider_crew._compat import AirflowSkipException
from airflow_provider_crew.exceptions import (
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewReviewRoundsExhaustedError,
    CrewReviewTimeoutError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.operators.base import (
    WEBHOOK_PARAMETERS,
    check_webhook_parameter,
    refuse_own_crew_webhook,
    resume_webhook_addresses,
    try_number,
    why_answer_is_outdated,
)
from airflow_provider_crew.review.base import ReviewTaskBase
from airflow_provider_crew.review.record import Answered, ReviewRequest, RoundRecord, RoundRetry
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.rules import Outcome, WaitFor, WaitResult
from airflow_provider_crew.waiting.xcom import XCOM_REVIEW_REQUEST, XCOM_STATUS, record_without_output

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.bases.notifier import BaseNotifier

# After POST /resume a service may still report the old pause for a moment; a pause with the same
# task and output within this window is that stale record, not a new round.
STALE_PAUSE_GRACE = 30.0


class CrewReviewRoundOperator(ReviewTaskBase):
    """
    One review round: read the pause, ask the reviewer, send the answer to the crew.

    Made by :func:`crew_human_review` (docs/human-review.md). The round skips when the execution
    finished without (another) pause; when it starts before the pause (run on its own, or cleared),
    it defers until the pause.

    :param round_number: Which round this is (1-based).
    :param subject: Headline of the request; ``{task}`` is replaced by the paused crew task.
    :param assigned_users: Who may answer (``{"id": ..., "name": ...}`` or a list).
    :param notifiers: Notifiers called when the request is written (``task.body`` is its text).
    :param response_timeout: How long the round waits for an answer; then it fails and, unless
        ``approve_on_timeout``, stops the execution (``stop_crew``) or leaves it paused.
    :param approve_on_timeout: Approve when ``response_timeout`` passes without an answer (needs a
        ``response_timeout``).
    :param carry_over_webhooks: Re-send the kickoff's webhook addresses at resume (docs/contract.md).

    :xcom return_value: This round's record (:class:`~.record.RoundRecord`; docs/human-review.md
        lists its keys); none when the round is skipped.
    :xcom kickoff_id: The execution under review.
    :xcom execution_url:
    :xcom review_request: The request this round wrote (:class:`~.record.ReviewRequest`; its
        ``asked_at``, epoch seconds, times the reviewer's answer).
    :xcom status: The last status record, when the execution finished before this round.
    """

    template_fields: Sequence[str] = (*ReviewTaskBase.template_fields, *WEBHOOK_PARAMETERS)
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

    def execute(self, context: Context) -> RoundRecord:
        kickoff_id = self._start(context)
        kept = RoundRetry(context, kickoff_id, self)
        applied = kept.applied_by_earlier_try()
        if applied is not None:
            return applied
        # Usually over at the first read (the sensor before the round saw the pause); else _wait defers.
        result = self._wait(context, kickoff_id, wait_for=WaitFor.HUMAN_INPUT, timeout=self.timeout)
        return self._on_crew_result(context, kept, result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> RoundRecord:
        """Back from the crew status trigger: ask on a pause, skip when the execution finished."""
        kickoff_id, result = self._result_from_event(context, event)
        return self._on_crew_result(context, RoundRetry(context, kickoff_id, self), result)

    def _trigger_success_outcomes(self) -> list[str]:
        return []  # a pause must be asked about, and an end skips the round: both on a worker

    def _on_crew_result(self, context: Context, kept: RoundRetry, result: WaitResult) -> NoReturn:
        kickoff_id = kept.kickoff_id
        self._end_wait(kickoff_id, result, context)
        status = result.last_status
        if result.outcome is Outcome.PAUSED and status is not None:
            written = self._write_request(context, kickoff_id, status)
            resume_with = self._resume_kwargs(
                {"kickoff_id": kickoff_id, "crew_task_id": status.paused_task_id}
            )
            # Parks or defers (or collects what an earlier try asked): returns only through execute_review.
            answer.ask(self, context, written, resume_with, kept.resume.records)
        ti = context["ti"]
        if status is not None:
            ti.xcom_push(key=XCOM_STATUS, value=record_without_output(status))
        # No record, but a value (under the record's key): the result task reads every round's, and reading
        # one that is not there makes Airflow log an "XCom not found" error; a pull of it gives None anyway.
        ti.xcom_push(key="return_value", value=None)
        if not self._rounds_before(context, self.round_task_ids[: self.round_number - 1]):
            self.log.warning(
                "Crew execution %s finished without pausing for human input: nothing was reviewed. "
                "Tasks pause only when the kickoff gave a human-input webhook.",
                kickoff_id,
            )
        raise AirflowSkipException(
            f"Crew execution {kickoff_id} finished: no review round {self.round_number}."
        )

    def _write_request(self, context: Context, kickoff_id: str, status: CrewStatus) -> ReviewRequest:
        """This round's request (pushed to XCom ``review_request``): what the reviewer reads."""
        crew_task = request.crew_task_name(status)
        subject = self.subject.replace("{task}", crew_task)
        body = request.review_body(
            self,
            kickoff_id,
            status,
            self._rounds_before(context, self.round_task_ids[: self.round_number - 1]),
            retried=try_number(context) > 1,
            stops_crew=self._stops_crew() and CrewHook(crew_conn_id=self.crew_conn_id).config.stop_executions,
        )
        written: ReviewRequest = {
            "round": self.round_number,
            "kickoff_id": kickoff_id,
            "crew_task_id": status.paused_task_id,
            "crew_task": crew_task,
            "output": status.paused_task_output,
            "subject": f"{subject} (round {self.round_number} of {len(self.round_task_ids)})",
            "body": body,
            "asked_at": time.time(),  # for crew.review.response_time
        }
        context["ti"].xcom_push(key=XCOM_REVIEW_REQUEST, value=written)
        self.body = body
        return written

    def execute_review(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        *,
        kickoff_id: str,
        crew_task_id: str,
    ) -> RoundRecord:
        """Back from the human-in-the-loop wait (``event``: the answer, or an error such as a time-out):
        send the answer to the crew and end the round."""
        ti = context["ti"]
        asked = ti.xcom_pull(task_ids=self.task_id, key=XCOM_REVIEW_REQUEST, map_indexes=ti.map_index) or {}
        kept = RoundRetry(context, kickoff_id, self)
        given = answer.answer_from_event(event)
        kept.count(given, asked.get("asked_at"))
        if given is None:  # nobody answered within response_timeout
            if not self._stops_crew():  # the execution stays paused, for a later answer
                raise CrewReviewTimeoutError(
                    f"No review answer within {request.duration_text(self.response_timeout or timedelta())} "
                    f"(response_timeout). Crew execution {kickoff_id} is still waiting for human input on "
                    f"task {crew_task_id!r}: clear this task to ask again, or resume it with "
                    "CrewResumeOperator."
                )
            came_of_it = self._stop_cut_off_wait(kickoff_id, stopping.REVIEW_TIMEOUT, context)
            raise CrewReviewTimeoutError(
                f"No review answer within response_timeout, and approve_on_timeout is off: nobody will "
                f"answer crew execution {kickoff_id}'s pause on task {crew_task_id!r}, so this task "
                f"stopped it (stop_crew): {came_of_it}. To keep such a pause for a later answer, pass "
                "stop_crew=False to crew_human_review."
            )
        unsent = not given["is_approve"] and not given["feedback"].strip()
        feedback = given["feedback"] if unsent else answer.feedback_for_crew(given, self.response_timeout)
        about = Answered(self.round_number, crew_task_id, asked, given, feedback)
        if unsent:
            return self._not_sent(
                about, "Changes were requested without feedback, so nothing was sent to the crew."
            )
        if not given["is_approve"] and self.round_number == len(self.round_task_ids):
            self._not_sent(about, "Changes were requested in the last review round.")
            raise CrewReviewRoundsExhaustedError(
                f"All {len(self.round_task_ids)} review rounds are used and round {self.round_number} "
                f"asked for changes: crew execution {kickoff_id} stays paused on task "
                f"{asked.get('crew_task') or crew_task_id!r}, the feedback was not sent. To go on, "
                "raise max_rounds and clear this task, or resume the execution with CrewResumeOperator."
            )
        return self._send(context, kept, about)

    def _send(self, context: Context, kept: RoundRetry, about: Answered) -> RoundRecord:
        """Resume the execution with the answer (recorded in ``kept.resume`` with the request it answers),
        unless it no longer waits on the reviewed output; the round's record says which."""
        kickoff_id, crew_task_id, output = kept.kickoff_id, about.crew_task_id, about.asked.get("output")
        hook = CrewHook(crew_conn_id=self.crew_conn_id)

        def outdated() -> str | None:  # why the answer no longer applies; a CrewError when unread
            return why_answer_is_outdated(hook.get_status(kickoff_id), crew_task_id, output)

        status = None  # read once before the POST: the moved-on check and the budget's
        try:
            status = hook.get_status(kickoff_id)
        except CrewError as error:
            self.log.warning("Could not read the status before resuming (%s); sending the answer.", error)
        moved_on = None if status is None else why_answer_is_outdated(status, crew_task_id, output)
        if moved_on:
            return self._not_sent(about, moved_on)
        refuse_own_crew_webhook(self, hook.config)
        self._refuse_over_budget(hook, kickoff_id, status)
        webhooks = resume_webhook_addresses(context, kickoff_id, self, self._webhook_wake(context, hook))
        request = about.asked or None
        try:
            result = kept.resume.send(
                lambda: hook.resume(
                    kickoff_id, crew_task_id, about.feedback, about.given["is_approve"], **webhooks
                ),
                claim={"record": about.record(True), "request": request},
                sent=lambda result: {"record": about.applied(result), "request": request},
            )
        except CrewBadRequestError as error:
            return self._not_sent(
                about, f"The crew did not accept the answer: {error.service_message or error}"
            )
        self.log.info(
            "Round %d: %s by %s; crew execution %s %s.",
            self.round_number,
            about.given["answer"],
            (about.given["responded_by"] or {}).get("name", "nobody (time-out default)"),
            kickoff_id,
            result.status.value,
        )
        self._let_stale_pause_pass(kickoff_id, outdated)
        return about.applied(result)

    def _not_sent(self, about: Answered, why: str) -> RoundRecord:
        self.log.warning("Round %d: the answer was not applied. %s", self.round_number, why)
        return about.record(False, note=why)

    def _let_stale_pause_pass(self, kickoff_id: str, outdated: Callable[[], str | None]) -> None:
        """Poll briefly while the service still shows the pause just answered, that is while
        ``outdated()`` is None (bounded, usually 1 poll).

        The next round starts from the first status it reads: it must not take this stale record for
        a new pause.
        """
        deadline = time.monotonic() + STALE_PAUSE_GRACE
        while time.monotonic() < deadline:
            try:
                if outdated() is not None:
                    return  # the service no longer shows the answered pause
            except CrewError:
                return  # the next round's wait handles errors and 404s properly
            time.sleep(min(self.poll_interval, 1.0))
        self.log.warning("Crew execution %s still shows the answered pause.", kickoff_id)


__all__ = ["CrewReviewRoundOperator"]
