"""Human review of a crew's work in Airflow's human-in-the-loop UI (Airflow 3.1+), in one package.

DAG code uses :func:`crew_human_review` (:mod:`.group`), which lays out a task group of review
rounds and a result task:

- :mod:`.round`: one round (wait for the crew's pause, ask the reviewer, send the answer);
- :mod:`.result`: the result task (wait for the end, return the output and every round's record);
- :mod:`.base`: what both share, with the one definition of their shared parameters;
- :mod:`.request`: what the reviewer reads (the request's text, the answer options);
- :mod:`.answer`: how a round waits for the answer (parking, or its trigger on 3.1-3.2), reads it,
  and keeps it in the task state store for a retry.
"""

from __future__ import annotations

from airflow_provider_crew.exceptions import CrewReviewRoundsExhaustedError, CrewReviewTimeoutError
from airflow_provider_crew.review.answer import (
    APPROVED_WITHOUT_TEXT,
    CrewReviewAnswerTrigger,
    ReviewAnswer,
    answer_from_event,
    feedback_for_crew,
    why_answer_is_outdated,
)
from airflow_provider_crew.review.base import XCOM_REVIEW_HISTORY, XCOM_REVIEW_REQUEST
from airflow_provider_crew.review.group import crew_human_review
from airflow_provider_crew.review.request import (
    APPROVE,
    FEEDBACK_PARAM,
    OPTIONS,
    OUTPUT_BODY_LIMIT,
    REQUEST_CHANGES,
    crew_task_name,
    review_body,
)
from airflow_provider_crew.review.result import CrewReviewResultOperator
from airflow_provider_crew.review.round import CrewReviewRoundOperator

__all__ = [
    "APPROVE",
    "APPROVED_WITHOUT_TEXT",
    "FEEDBACK_PARAM",
    "OPTIONS",
    "OUTPUT_BODY_LIMIT",
    "REQUEST_CHANGES",
    "XCOM_REVIEW_HISTORY",
    "XCOM_REVIEW_REQUEST",
    "CrewReviewAnswerTrigger",
    "CrewReviewResultOperator",
    "CrewReviewRoundOperator",
    "CrewReviewRoundsExhaustedError",
    "CrewReviewTimeoutError",
    "ReviewAnswer",
    "answer_from_event",
    "crew_human_review",
    "crew_task_name",
    "feedback_for_crew",
    "review_body",
    "why_answer_is_outdated",
]
