"""A review round's records: what it asked, what came of it, and what it keeps for a retry.

- :class:`ReviewRequest`: the request a round wrote (XCom ``review_request``; the Crew views read it);
- :class:`RoundRecord`: the round's record, its return value (each one in ``review_history``);
- :class:`RoundRetry`: what a round keeps in the task state store (Airflow 3.3+), built once per run
  of the task, so that a retry neither asks twice nor applies an answer twice.

The records are typed dicts: their JSON form is the XCom value docs/human-review.md and docs/api.md
document.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

from airflow_provider_crew.operators.paid_post import PaidPost, RetryRecords
from airflow_provider_crew.status import CrewStatus

if TYPE_CHECKING:
    from airflow.sdk import Context

# Where a round keeps the record of an answer it applied, for a retry of the same round (Airflow 3.3+).
APPLIED_RECORD_KEY = "crew_review_applied"
# Where a round keeps what it asked about (execution, crew task, a digest of the output), so that a
# retry can tell an answer given to its earlier try about this very pause (Airflow 3.3+).
ASKED_RECORD_KEY = "crew_review_asked"


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


class ReviewAnswer(TypedDict):
    """A reviewer's answer, as a round records it."""

    answer: str
    is_approve: bool
    feedback: str
    responded_by: Mapping[str, Any] | None
    responded_at: Any
    timed_out: bool


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


def is_round_record(value: Any) -> TypeGuard[RoundRecord]:
    """Whether an XCom value is a round's record (a skipped round has none)."""
    return isinstance(value, dict) and "round" in value


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


class RoundRetry:
    """One round's records in the task state store, about one execution; they do nothing before 3.3.

    :param context: The task's context.
    :param kickoff_id: The execution under review.
    :param round_number: The round, for messages.
    :param log: The task's logger.
    :param timeout: The round's wait ``timeout`` in seconds (how long the records are kept, with a week
        more: :class:`~airflow_provider_crew.operators.paid_post.RetryRecords`).
    """

    def __init__(
        self, context: Context, kickoff_id: str, round_number: int, log: Any, timeout: float
    ) -> None:
        self.kickoff_id = kickoff_id
        self.round_number = round_number
        self.log = log
        #: The record of this round's ``POST /resume`` to the execution.
        self.resume = PaidPost(
            context,
            key=APPLIED_RECORD_KEY,
            request=f"POST /resume to crew execution {kickoff_id}",
            kind="review",
            timeout=timeout,
            log=log,
            execution_id=kickoff_id,
        )
        self.records: RetryRecords = self.resume.records

    def keep_asked(self, status: CrewStatus) -> None:
        """Keep what this try asks about; a failed write only means a retry asks again."""
        try:
            self.records.set(ASKED_RECORD_KEY, asked_about(self.kickoff_id, status))
        except Exception as error:
            self.log.warning("Could not keep what round %d asked about: %s", self.round_number, error)

    def asked_before(self, status: CrewStatus) -> bool:
        """Whether an earlier try of this run of the round asked about this very pause."""
        try:
            kept = self.records.get(ASKED_RECORD_KEY)
        except Exception as error:  # then ask again: nothing is lost
            self.log.warning("Could not read what round %d asked about: %s", self.round_number, error)
            return False
        asked = asked_about(self.kickoff_id, status)
        return kept is not None and all(kept.get(key) == value for key, value in asked.items())

    def applied_by_earlier_try(self) -> RoundRecord | None:
        """The round's record, when an earlier try of this run sent its answer to this execution."""
        kept = self.resume.earlier() or {}
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
            self.kickoff_id,
        )
        return record  # type: ignore[return-value]


__all__ = [
    "ReviewAnswer",
    "ReviewRequest",
    "RoundRecord",
    "RoundRetry",
    "SendOutcome",
    "is_round_record",
]
