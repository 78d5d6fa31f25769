"""Where ``CrewReviewRoundOperator`` was imported from before the review became one package
(:mod:`airflow_provider_crew.review`); it keeps working from here."""

from __future__ import annotations

from airflow_provider_crew.review.round import CrewReviewRoundOperator

__all__ = ["CrewReviewRoundOperator"]
