"""The reviewer's answer: how a round asks for it, once per pause (:func:`ask`), waits for it (parked on
Airflow 3.3+, else :class:`CrewReviewAnswerTrigger`) and reads it (:func:`answer_from_event`)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_provider_crew._compat import HITLTrigger, hitl_params, task_awaiting_input, upsert_hitl_detail
from airflow_provider_crew.exceptions import CrewError
from airflow_provider_crew.review.record import ReviewAnswer, ReviewRequest
from airflow_provider_crew.review.request import APPROVE, FEEDBACK_PARAM, OPTIONS
from airflow_provider_crew.waiting.race import deferral_settle_seconds, hold_until
from airflow_provider_crew.waiting.xcom import shorten

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import TriggerEvent

    from airflow_provider_crew.operators.paid_post import RetryRecords

ASKED_RECORD_KEY = "crew_review_asked"


def answer_form(task: Any) -> dict[str, Any]:
    """What the request offers, as both its writer and the trigger that reads its answer must say it:
    the options, the time-out default, and one form field, ``feedback`` (as the running Airflow stores it).
    """
    from airflow.providers.common.compat.sdk import Param

    feedback = Param(
        "",
        type=["string", "null"],
        title="Feedback",
        description="Required with 'Request changes': what the crew should change. Optional "
        "with 'Approve': added to the crew's context.",
    )
    return {
        "options": list(OPTIONS),
        "defaults": [APPROVE] if task.approve_on_timeout else None,
        "multiple": False,
        "params": hitl_params({FEEDBACK_PARAM: feedback}),
    }


def asked_about(request: ReviewRequest) -> dict[str, str]:
    """What identifies the pause ``request`` asks about (the output as a digest: it may be long)."""
    output = request["output"] or ""
    return {
        "kickoff_id": request["kickoff_id"],
        "crew_task_id": request["crew_task_id"] or "",
        "output_sha256": hashlib.sha256(output.encode()).hexdigest(),
    }


def ask(
    task: Any, context: Context, request: ReviewRequest, kwargs: dict[str, Any], records: RetryRecords
) -> NoReturn:
    """Ask the reviewer about ``request``: notify, write it as this task instance's human-in-the-loop
    request and wait for the answer slot-free: parked on 3.3+ (the answer resumes ``execute_review``),
    else :func:`collect`. A retry whose earlier try asked about this very pause collects instead.

    :param task: The round (its ``round_number``, ``notifiers``, ``assigned_users``, ``response_timeout``...).
    :param kwargs: What ``execute_review`` is called with besides the answer.
    :param records: Where the round keeps what it asked about for a retry (:class:`~.record.RoundRetry`).
    """
    asked = asked_about(request)
    if _asked_before(task, records, asked):
        task.log.warning(
            "Round %d asked about this pause in an earlier try, which Airflow ended before an "
            "answer was applied (an answer that lands before the scheduler has handled the "
            "parking, apache/airflow#72716). Collecting the answer given to that request, if any, "
            "instead of asking again.",
            task.round_number,
        )
    else:
        for notifier in task.notifiers:
            notifier(context)
        # Kept after the notifiers, right before the request is written: a try that Airflow ends as the
        # answer lands has kept it, and one that fails before (a notifier) leaves its retry to ask anew.
        try:
            records.set(ASKED_RECORD_KEY, asked)
        except Exception as error:  # then a retry asks again
            task.log.warning("Could not keep what round %d asked about: %s", task.round_number, error)
        upsert_hitl_detail(
            ti_id=context["task_instance"].id,
            subject=request["subject"],
            body=request["body"],
            assigned_users=[dict(user) for user in task.assigned_users],  # type: ignore[misc]
            **answer_form(task),
        )
        task.log.info(
            "Review round %d: crew execution %s waits for human input on task %r. Output under review:\n%s",
            task.round_number,
            request["kickoff_id"],
            request["crew_task"],
            shorten(request["output"]),
        )
        parked = task_awaiting_input(
            method_name="execute_review", kwargs=kwargs, timeout=task.response_timeout
        )
        if parked is not None:
            raise parked
    collect(task, context, kwargs)


def _asked_before(task: Any, records: RetryRecords, asked: dict[str, str]) -> bool:
    """Whether an earlier try of this run of the round asked about this very pause."""
    try:
        kept = records.get(ASKED_RECORD_KEY)
    except Exception as error:  # then ask again: nothing is lost
        task.log.warning("Could not read what round %d asked about: %s", task.round_number, error)
        return False
    return kept is not None and asked.items() <= kept.items()


def collect(task: Any, context: Context, kwargs: dict[str, Any]) -> NoReturn:
    """Wait in the triggerer for the answer to this task instance's request, as it stands.

    The request is not written again, so an answer it already holds is kept: Airflow clears the
    answer when a try writes the request again (a task cannot read a request's answer on Airflow
    3.3; a trigger can). Needs Airflow 3.1+. Parameters as for :func:`ask`.
    """
    from airflow.sdk.timezone import utcnow

    task.defer(
        trigger=CrewReviewAnswerTrigger(
            ti_id=context["task_instance"].id,
            timeout_datetime=utcnow() + task.response_timeout if task.response_timeout else None,
            not_before=time.time() + deferral_settle_seconds(),
            **answer_form(task),
        ),
        method_name="execute_review",
        kwargs=kwargs,
    )
    raise AssertionError("defer() returned")  # pragma: no cover - defer always raises


def answer_from_event(event: Any) -> ReviewAnswer | None:
    """The reviewer's answer in the human-in-the-loop event the round resumed with; None when nobody
    answered within ``response_timeout`` (and no default answer was set): the round decides what that
    does to the execution.

    :raises CrewError: The request failed otherwise, or the event holds no single known option.
    """
    if not isinstance(event, Mapping):
        raise CrewError(f"Expected a human-in-the-loop event, got {event!r}.")
    if "error" in event:
        if event.get("error_type") == "timeout":
            return None
        raise CrewError(f"The review request failed ({event.get('error_type')}): {event.get('error')}")
    chosen = list(event.get("chosen_options") or [])
    if len(chosen) != 1 or chosen[0] not in OPTIONS:
        raise CrewError(f"Expected exactly one of {OPTIONS} as the answer, got {chosen!r}.")
    responded_at = event.get("responded_at")
    return {
        "answer": chosen[0],
        "is_approve": chosen[0] == APPROVE,
        "feedback": str((event.get("params_input") or {}).get(FEEDBACK_PARAM) or ""),
        "responded_by": event.get("responded_by_user"),
        "responded_at": responded_at.isoformat() if isinstance(responded_at, datetime) else responded_at,
        "timed_out": bool(event.get("timedout")),
    }


def feedback_for_crew(answer: ReviewAnswer, response_timeout: timedelta | None) -> str:
    """The feedback sent with the resume: the reviewer's words, or why an approval has none."""
    return answer["feedback"].strip() or (
        f"Approved automatically: no answer within {response_timeout}."
        if answer["timed_out"]
        else "Approved."
    )


class CrewReviewAnswerTrigger(HITLTrigger):
    """
    Wait for a review answer in the triggerer: every round's wait on Airflow 3.1-3.2; on 3.3+ only a
    retried round's, which collects the answer to the request an earlier try wrote.

    Airflow's ``HITLTrigger``, holding back an answer given within seconds of the request: Airflow's
    stale executor-event race (:mod:`~airflow_provider_crew.waiting.race`).

    :param not_before: Epoch seconds before which no event is fired (the race's bound).
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
    "CrewReviewAnswerTrigger",
    "answer_from_event",
    "ask",
    "collect",
    "feedback_for_crew",
]
