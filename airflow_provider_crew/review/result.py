"""The end of a human review: wait for the execution to finish; its final output goes to XCom ``result``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_crew.exceptions import CrewReviewRoundsExhaustedError
from airflow_provider_crew.review.base import ReviewTaskBase
from airflow_provider_crew.review.request import crew_task_name
from airflow_provider_crew.waiting.rules import Outcome, WaitFor, WaitResult
from airflow_provider_crew.waiting.xcom import XCOM_REVIEW_HISTORY, XCOM_STATUS

if TYPE_CHECKING:
    from airflow.sdk import Context


class CrewReviewResultOperator(ReviewTaskBase):
    """
    The end of a review: wait for the execution to finish; push its final output to XCom ``result``.

    Runs after the rounds (``trigger_rule="none_failed"``: skipped rounds are fine). Fails when the
    execution pauses again after the last round, leaving it paused.

    :xcom return_value:
    :xcom result: The execution's final output.
    :xcom kickoff_id: The execution.
    :xcom execution_url:
    :xcom review_history: Every round's record, in order, pushed before the wait.
    :xcom usage:
    :xcom status: The last status record; at the end, less the final output, which is stored once,
        in ``result``.
    """

    ui_color = "#e9d8fd"

    def execute(self, context: Context) -> str:
        kickoff_id = self._start(context)
        ti = context["ti"]
        ti.xcom_push(key=XCOM_REVIEW_HISTORY, value=self._rounds_before(context, self.round_task_ids))
        result = self._wait(context, kickoff_id, wait_for=WaitFor.HUMAN_INPUT, timeout=self.timeout)
        return self._finish(context, kickoff_id, result)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> str:
        kickoff_id, result = self._result_from_event(context, event)
        return self._finish(context, kickoff_id, result)

    def _trigger_success_outcomes(self) -> list[str]:
        # A pause after the last round fails the review, on a worker.
        outcomes = super()._trigger_success_outcomes()
        return [outcome for outcome in outcomes if outcome == Outcome.SUCCEEDED.value]

    def _finish(self, context: Context, kickoff_id: str, result: WaitResult) -> str:
        status = result.last_status
        if result.outcome is Outcome.PAUSED and status is not None:
            self._end_wait(kickoff_id, result, context)
            context["ti"].xcom_push(key=XCOM_STATUS, value=status.raw)
            raise CrewReviewRoundsExhaustedError(
                f"Crew execution {kickoff_id} paused for human input again, on task "
                f"{crew_task_name(status)!r}, after all {len(self.round_task_ids)} review rounds: it stays "
                "paused. Raise max_rounds of crew_human_review and clear this task group, or resume the "
                "execution with CrewResumeOperator."
            )
        return self._finish_wait(context, kickoff_id, result)


__all__ = ["CrewReviewResultOperator"]
