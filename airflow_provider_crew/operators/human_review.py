"""Where ``crew_human_review`` was imported from before the review became one package.

Everything of the review now lives in :mod:`airflow_provider_crew.review`; these names keep
working from here.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_crew.review import (
    APPROVE,
    FEEDBACK_PARAM,
    OPTIONS,
    REQUEST_CHANGES,
    XCOM_REVIEW_REQUEST,
    CrewReviewResultOperator,
    CrewReviewRoundOperator,
    CrewReviewRoundsExhaustedError,
    CrewReviewTimeoutError,
    crew_human_review,
    crew_task_name,
)

REPLACED = (
    "CrewHumanReviewOperator was replaced by crew_human_review(...), a task group with one task per "
    "review round (each round keeps its own request and answer). Import it from "
    "airflow_provider_crew.review."
)


def __getattr__(name: str) -> Any:
    if name == "CrewHumanReviewOperator":
        raise ImportError(REPLACED)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "APPROVE",
    "FEEDBACK_PARAM",
    "OPTIONS",
    "REQUEST_CHANGES",
    "XCOM_REVIEW_REQUEST",
    "CrewReviewResultOperator",
    "CrewReviewRoundOperator",
    "CrewReviewRoundsExhaustedError",
    "CrewReviewTimeoutError",
    "crew_human_review",
    "crew_task_name",
]
