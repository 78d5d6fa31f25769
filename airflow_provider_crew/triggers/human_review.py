"""Where ``CrewReviewAnswerTrigger`` lived before the review became one package.

The trigger is :class:`airflow_provider_crew.review.answer.CrewReviewAnswerTrigger`. A task deferred
by an earlier release is stored in Airflow's database under this module's path, so the triggerer
still finds it here.
"""

from __future__ import annotations

from airflow_provider_crew.review.answer import CrewReviewAnswerTrigger

__all__ = ["CrewReviewAnswerTrigger"]
