"""A review round's records: what it asked (:class:`ReviewRequest`), what came of it
(:class:`RoundRecord`, built once by :meth:`Answered.record`), and what it keeps for a retry
(:class:`RoundRetry`). The records are typed dicts: their JSON form is the XCom value
docs/human-review.md documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

from airflow_provider_crew import metrics
from airflow_provider_crew.operators.paid_post import PaidPost
from airflow_provider_crew.waiting.xcom import XCOM_REVIEW_REQUEST

if TYPE_CHECKING:
    from typing import Unpack

    from airflow.sdk import Context

    from airflow_provider_crew.models import ResumeResult


class ReviewRequest(TypedDict):
    """The request a round wrote: what the reviewer reads (XCom ``review_request``)."""

    round: int
    kickoff_id: str
    crew_task_id: str | None
    crew_task: str
    output: str | None
    subject: str
    body: str
    asked_at: float  # epoch seconds


class ReviewAnswer(metrics.ReviewedAnswer):
    """A reviewer's answer, as a round records it (``is_approve``, ``timed_out`` and ``responded_at``:
    what the metrics read of it)."""

    answer: str
    feedback: str
    responded_by: Mapping[str, Any] | None


class SendOutcome(TypedDict, total=False):
    """What came of sending the answer: the service's answer to the resume, or why nothing was sent."""

    resume_status: str
    resume_message: str | None
    note: str


class RoundRecord(ReviewAnswer, SendOutcome):
    """A round's record (its return value): the answer, what it was about, and what came of it."""

    round: int
    crew_task_id: str
    crew_task: str | None
    output: str | None
    applied: bool


@dataclass(frozen=True)
class Answered:
    """A pause a round asked about and the reviewer's answer: the one owner of the round's record."""

    round: int
    crew_task_id: str
    asked: Mapping[str, Any]  # the round's request (ReviewRequest); {} when its XCom is gone
    given: ReviewAnswer
    #: What the record says was sent: the feedback for the crew, or the reviewer's words when none is.
    feedback: str

    def record(self, applied: bool, **came_of_it: Unpack[SendOutcome]) -> RoundRecord:
        """The round's record, built once what came of the answer is known (its keys in the order the
        XCom value has always had them)."""
        return {
            "round": self.round,
            "crew_task_id": self.crew_task_id,
            "crew_task": self.asked.get("crew_task"),
            "output": self.asked.get("output"),
            **self.given,
            "feedback": self.feedback,
            "applied": applied,
            **came_of_it,
        }

    def applied(self, result: ResumeResult) -> RoundRecord:
        """The record of an answer the crew took, with the service's answer to the resume."""
        return self.record(True, resume_status=result.status.value, resume_message=result.message)


def is_round_record(value: Any) -> TypeGuard[RoundRecord]:
    """Whether an XCom value is a round's record (a skipped round has none)."""
    return isinstance(value, dict) and "round" in value


APPLIED_RECORD_KEY = "crew_review_applied"
COUNTED_RECORD_KEY = "crew_review_counted"


class RoundRetry:
    """What a round keeps for its retry, about one execution, in the task state store (3.3+; before, it
    does nothing). Airflow can fail a round around its answer (waiting/race.py), and the store outlives a
    try: a round keeps there the answer it sends (operators.paid_post), so that a retry returns its
    record, and in the same records (``resume.records``) what it asked about, which the asking keeps and
    reads (:func:`.answer.ask`). Built once per run of the round (``task``: its number, log, ``timeout``)."""

    def __init__(self, context: Context, kickoff_id: str, task: Any) -> None:
        self.kickoff_id = kickoff_id
        self.ti = context["ti"]
        self.round_number = task.round_number
        self.log = task.log
        #: The record of this round's ``POST /resume`` to the execution (kept ``timeout`` and a week).
        self.resume = PaidPost(context, task, key=APPLIED_RECORD_KEY, kind="review", execution_id=kickoff_id)

    def count(self, given: ReviewAnswer | None, asked_at: float | None) -> None:
        """Count this answer (``None``: nobody answered) in the metrics, asked at ``asked_at``, unless an
        earlier try did: a retry that collects the answer an earlier try took does not count it again.

        Not when the record cannot be written: on 3.3 that is a try Airflow has already ended
        (:mod:`~airflow_provider_crew.waiting.race`), whose retry collects the answer and counts it.
        """
        taken = str(given["responded_at"]) if given else "nobody answered"
        try:
            kept = self.resume.records.get(COUNTED_RECORD_KEY)
            if kept is not None and kept.get("answer") == taken:
                return
            self.resume.records.set(COUNTED_RECORD_KEY, {"answer": taken})
        except Exception as error:
            self.log.warning("Round %d's answer is not counted here: %s", self.round_number, error)
            return
        metrics.review_round(self.resume.task, given, asked_at)

    def applied_by_earlier_try(self) -> RoundRecord | None:
        """The round's record, when an earlier try of this run sent its answer to this execution; the
        request it answered is pushed to XCom ``review_request`` again (Airflow clears a task's XComs
        when a new try starts)."""
        kept = self.resume.earlier() or {}
        record = kept.get("record")
        if not isinstance(record, dict):
            return None
        if kept.get("request") is not None:
            self.ti.xcom_push(key=XCOM_REVIEW_REQUEST, value=kept["request"])
        if kept.get("state") == "claimed":
            # The try ended between claiming and confirming: the answer may have reached the crew.
            # Sending it again could apply it twice; a crew left paused is asked about by the next round.
            record = {**record, "note": "An earlier try was stopped while sending this answer."}
        self.log.info(
            "Round %d's answer (%s) was sent to crew execution %s by an earlier try; returning its "
            "record instead of waiting for another pause.",
            self.round_number,
            record.get("answer"),
            self.kickoff_id,
        )
        return record  # type: ignore[return-value]
