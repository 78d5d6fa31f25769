"""CrewReviewAnswerTrigger: waits for a review answer on Airflow 3.1-3.2 (3.3+ needs no trigger)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.standard.triggers.hitl import HITLTrigger
from airflow.triggers.base import TriggerEvent

from airflow_provider_crew.triggers.crew import hold_until


class CrewReviewAnswerTrigger(HITLTrigger):
    """
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
