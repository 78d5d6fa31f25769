"""The reviewer's answer: how a round waits for it, reads it, and keeps it for a retry.

- Waiting: the round writes Airflow's human-in-the-loop request and waits without a worker slot.
  Airflow 3.3+ parks the task (``awaiting_input``; the answer resumes it). Airflow 3.1-3.2 defer it
  to :class:`CrewReviewAnswerTrigger`, which holds the answer back until the deferral is surely
  handled (Airflow's stale executor-event race,
  :func:`~airflow_provider_crew.waiting.race.deferral_settle_seconds`).
- Reading: :func:`answer_from_event`, :func:`why_answer_is_outdated`, :func:`feedback_for_crew`.
- Keeping: :class:`RoundRecords`, what a round keeps in the task state store (3.3+) so that a retry
  neither asks twice nor applies an answer twice.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

from airflow.triggers.base import TriggerEvent

from airflow_provider_crew._compat import HITLTrigger, hitl_params, task_awaiting_input
from airflow_provider_crew.exceptions import CrewError, CrewReviewTimeoutError
from airflow_provider_crew.operators.base import why_answer_is_outdated
from airflow_provider_crew.operators.paid_post import PaidPost, RetryRecords
from airflow_provider_crew.review.request import APPROVE, FEEDBACK_PARAM, OPTIONS, duration_text
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting.race import deferral_settle_seconds, hold_until

if TYPE_CHECKING:
    from airflow.sdk import Context

APPROVED_WITHOUT_TEXT = "Approved."
# Where a round keeps the record of an answer it applied, for a retry of the same round (Airflow 3.3+).
APPLIED_RECORD_KEY = "crew_review_applied"
# Where a round keeps what it asked about (execution, crew task, a digest of the output), so that a
# retry can tell an answer given to its earlier try about this very pause (Airflow 3.3+).
ASKED_RECORD_KEY = "crew_review_asked"


class ReviewAnswer(TypedDict):
    """A reviewer's answer, as a round records it."""

    answer: str
    is_approve: bool
    feedback: str
    responded_by: Mapping[str, Any] | None
    responded_at: Any
    timed_out: bool


# -- waiting for the answer -------------------------------------------------------------------------


def answer_params() -> dict[str, Any]:
    """The request's one form field, ``feedback``, in the form the running Airflow stores."""
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


def park_for_answer(
    task: Any,
    context: Context,
    *,
    subject: str,
    body: str,
    assigned_users: list[dict[str, str]],
    approve_on_timeout: bool,
    response_timeout: timedelta | None,
    method_name: str,
    kwargs: dict[str, Any],
) -> NoReturn:
    """Write a human-in-the-loop request for this task instance and wait for the answer, slot-free.

    Airflow 3.3+ parks the task in ``awaiting_input`` (the answer resumes it directly). Airflow
    3.1-3.2 defer it to a trigger that polls for the answer (:func:`defer_until_answered`).
    """
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    upsert_hitl_detail(
        ti_id=context["task_instance"].id,
        options=list(OPTIONS),
        subject=subject,
        body=body,
        defaults=[APPROVE] if approve_on_timeout else None,
        multiple=False,
        params=answer_params(),
        assigned_users=assigned_users,  # type: ignore[arg-type]
    )
    parked = task_awaiting_input(method_name=method_name, kwargs=kwargs, timeout=response_timeout)
    if parked is not None:
        raise parked
    defer_until_answered(
        task,
        context,
        approve_on_timeout=approve_on_timeout,
        response_timeout=response_timeout,
        method_name=method_name,
        kwargs=kwargs,
    )


def defer_until_answered(
    task: Any,
    context: Context,
    *,
    approve_on_timeout: bool,
    response_timeout: timedelta | None,
    method_name: str,
    kwargs: dict[str, Any],
) -> NoReturn:
    """Wait in the triggerer for the answer to this task instance's request, as it stands.

    The request is not written again, so an answer it already holds is kept: Airflow clears the
    answer when a try writes the request again. The answer is held back until the deferring
    process's exit is surely handled. Needs Airflow 3.1+.
    """
    from airflow.sdk.timezone import utcnow

    task.defer(
        trigger=CrewReviewAnswerTrigger(
            ti_id=context["task_instance"].id,
            options=list(OPTIONS),
            defaults=[APPROVE] if approve_on_timeout else None,
            params=answer_params(),
            multiple=False,
            timeout_datetime=utcnow() + response_timeout if response_timeout else None,
            not_before=time.time() + deferral_settle_seconds(),
        ),
        method_name=method_name,
        kwargs=kwargs,
    )
    raise AssertionError("defer() returned")  # pragma: no cover - defer always raises


# -- reading the answer -------------------------------------------------------------------------------


def answer_from_event(
    event: Any, *, kickoff_id: str, crew_task_id: str, response_timeout: timedelta | None
) -> ReviewAnswer:
    """The reviewer's answer in a human-in-the-loop event.

    :param event: The event the round resumed with: the answer, or an error such as a time-out.
    :param kickoff_id: The execution under review (for the time-out message).
    :param crew_task_id: The paused crew task the answer is about (for the time-out message).
    :param response_timeout: How long the round waited (for the time-out message).
    :raises CrewReviewTimeoutError: Nobody answered in time (and no default answer was set).
    :raises CrewError: The request failed otherwise, or the event holds no single known option.
    """
    if not isinstance(event, Mapping):
        raise CrewError(f"Expected a human-in-the-loop event, got {event!r}.")
    if "error" in event:
        if event.get("error_type") == "timeout":
            raise CrewReviewTimeoutError(
                f"No review answer within {duration_text(response_timeout or timedelta())} "
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


def feedback_for_crew(answer: ReviewAnswer, response_timeout: timedelta | None) -> str:
    """The feedback sent with the resume: the reviewer's words, or why an approval has none.

    :param answer: The reviewer's answer.
    :param response_timeout: How long the round waited (named when the approval is the time-out default).
    """
    return answer["feedback"].strip() or (
        f"Approved automatically: no answer within {response_timeout}."
        if answer["timed_out"]
        else APPROVED_WITHOUT_TEXT
    )


# -- what a round keeps for its retry -------------------------------------------------------------------
# Airflow can fail a round around its answer: an answer that lands before the scheduler has handled
# the parking process's exit gets the task failed (apache/airflow#72716). The task state store
# (Airflow 3.3+) outlives a try, so a round keeps there
# - what it asked about, so that a retry collects the answer given to its earlier try about this very
#   pause instead of asking again (Airflow keeps an answer with its request until a try writes the
#   request again): a program that answers at once would otherwise lose the race on every try;
# - the answer it sends (operators.paid_post, as CrewResumeOperator keeps its own): a retry
#   that finds the record returns it instead of waiting for another pause, so review_history keeps
#   who approved.


def asked_about(kickoff_id: str, status: CrewStatus) -> dict[str, str]:
    """What identifies a pause a round asked about (the output as a digest: it may be long)."""
    output = status.paused_task_output or ""
    return {
        "kickoff_id": kickoff_id,
        "crew_task_id": status.paused_task_id or "",
        "output_sha256": hashlib.sha256(output.encode()).hexdigest(),
    }


class RoundRecords:
    """One round's records in the task state store; every method does nothing before Airflow 3.3.

    :param context: The task's context.
    :param round_number: The round, for messages.
    :param log: The task's logger.
    :param timeout: The round's wait ``timeout`` in seconds (how long the records are kept, with a week
        more: :class:`~airflow_provider_crew.operators.paid_post.RetryRecords`).
    """

    def __init__(self, context: Context, round_number: int, log: Any, timeout: float) -> None:
        self.context, self.timeout = context, timeout
        self.records = RetryRecords(context, timeout)
        self.round_number = round_number
        self.log = log

    def keep_asked(self, kickoff_id: str, status: CrewStatus) -> None:
        """Keep what this try asks about; a failed write only means a retry asks again."""
        try:
            self.records.set(ASKED_RECORD_KEY, asked_about(kickoff_id, status))
        except Exception as error:
            self.log.warning("Could not keep what round %d asked about: %s", self.round_number, error)

    def asked_before(self, kickoff_id: str, status: CrewStatus) -> bool:
        """Whether an earlier try of this run of the round asked about this very pause."""
        try:
            kept = self.records.get(ASKED_RECORD_KEY)
        except Exception as error:  # then ask again: nothing is lost
            self.log.warning("Could not read what round %d asked about: %s", self.round_number, error)
            return False
        asked = asked_about(kickoff_id, status)
        return kept is not None and all(kept.get(key) == value for key, value in asked.items())

    def resume(self, kickoff_id: str) -> PaidPost:
        """The record of this round's ``POST /resume`` to ``kickoff_id``."""
        return PaidPost(
            self.context,
            key=APPLIED_RECORD_KEY,
            request=f"POST /resume to crew execution {kickoff_id}",
            timeout=self.timeout,
            log=self.log,
            execution_id=kickoff_id,
        )

    def applied_by_earlier_try(self, kickoff_id: str) -> dict[str, Any] | None:
        """The record of this round's answer, when an earlier try of this run sent it to this execution."""
        kept = self.resume(kickoff_id).earlier() or {}
        record = kept.get("record")
        if not isinstance(record, dict):
            return None
        if kept.get("state") == "claimed":
            # The try ended between claiming and confirming: the answer may have reached the crew.
            # Sending it again could apply it twice; a crew left paused is asked about by the next round.
            record = {**record, "note": "An earlier try was stopped while sending this answer."}
        self.log.info(
            "Round %d's answer (%s) was sent to crew execution %s by an earlier try; returning its "
            "record instead of waiting for another pause.",
            self.round_number,
            record.get("answer"),
            kickoff_id,
        )
        return record


# -- the trigger (Airflow 3.1-3.2) ----------------------------------------------------------------------


class CrewReviewAnswerTrigger(HITLTrigger):
    """
    Wait for a review answer in the triggerer: every round's wait on Airflow 3.1-3.2; on 3.3+ only a
    retried round's, which collects the answer to the request an earlier try wrote.

    Airflow's ``HITLTrigger``, holding the answer back until the task that deferred is surely gone.

    A reviewer can answer within a second of the request appearing. An event that resumes the task
    before the scheduler has handled the exit of the process that deferred gets the task failed
    (apache/airflow#67287); ``not_before`` is when that is surely done.

    :param not_before: Epoch seconds before which no event is fired.
    :param kwargs: ``HITLTrigger``'s own arguments.
    """

    def __init__(self, *, not_before: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.not_before = float(not_before)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        return f"{type(self).__module__}.{type(self).__qualname__}", {**kwargs, "not_before": self.not_before}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        async for event in super().run():
            await hold_until(self.not_before)
            yield event
            return


__all__ = [
    "APPROVED_WITHOUT_TEXT",
    "CrewReviewAnswerTrigger",
    "ReviewAnswer",
    "RoundRecords",
    "answer_from_event",
    "feedback_for_crew",
    "park_for_answer",
    "why_answer_is_outdated",
]
