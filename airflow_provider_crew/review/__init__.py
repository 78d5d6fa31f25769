"""Human review of a crew's work in Airflow's human-in-the-loop UI (Airflow 3.1+): DAG code calls
:func:`crew_human_review` (docs/human-review.md; each module's part: docs/architecture.md)."""

from __future__ import annotations

from airflow_provider_crew.review.group import CrewReviewGroup, crew_human_review

__all__ = ["CrewReviewGroup", "crew_human_review"]
